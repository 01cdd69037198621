/**
 * Rows of a long list that are on screen (windowing): the list renders those and spacers of
 * the right height for the rest, so a page of 500 or 5,000 sandboxes lays out a screenful of
 * rows, not all of them. Rows have one fixed height (the stylesheet's), per screen width.
 * The filters and the id search work on the whole list, not just the rows rendered.
 */
import type { RefObject } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';

/** Rows rendered above and below the screen, so that a scroll shows rows already there. */
const OVERSCAN = 15;

export interface RowWindow {
  start: number;
  end: number;
  rowHeight: number;
}

/** Row heights of table.sandboxes (style.css), a table row or a card on a narrow screen, until one is measured. */
function expectedRowHeight(): number {
  return window.matchMedia('(max-width: 700px)').matches ? 112 : 36;
}

/** The rows of `count` to render, for a list whose body is `ref` and that scrolls with the page. */
export function useRowWindow(ref: RefObject<HTMLElement>, count: number): RowWindow {
  const [win, setWin] = useState<RowWindow>(() => ({ start: 0, end: Math.min(count, 60), rowHeight: expectedRowHeight() }));
  const frame = useRef(0);
  useEffect(() => {
    const measure = () => {
      frame.current = 0;
      const el = ref.current;
      if (!el) return;
      // A rendered row's own height (borders included), so spacers match the rows they stand for.
      const height = el.querySelector('tr:not(.spacer)')?.getBoundingClientRect().height || expectedRowHeight();
      const top = el.getBoundingClientRect().top;
      const first = Math.max(0, Math.floor(-top / height) - OVERSCAN);
      const last = Math.min(count, Math.ceil((window.innerHeight - top) / height) + OVERSCAN);
      setWin((w) =>
        w.start === first && w.end === Math.max(first, last) && w.rowHeight === height ? w : { start: first, end: Math.max(first, last), rowHeight: height },
      );
    };
    const schedule = () => {
      if (!frame.current) frame.current = requestAnimationFrame(measure);
    };
    measure();
    window.addEventListener('scroll', schedule, { passive: true });
    window.addEventListener('resize', schedule);
    return () => {
      window.removeEventListener('scroll', schedule);
      window.removeEventListener('resize', schedule);
      if (frame.current) cancelAnimationFrame(frame.current);
    };
  }, [ref, count]);
  return win;
}
