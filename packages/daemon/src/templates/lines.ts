/** Splits a child's output into lines for the build stream and keeps the tail for errors. */

const MAX_LINE = 8 * 1024;
const TAIL_LINES = 40;

export class LineSplitter {
  private partial = '';
  /** The last lines of every stream this splitter has seen, for error messages. */
  constructor(
    private onLine: (line: string) => void,
    private tail: string[],
  ) {}

  push(chunk: Buffer | string): void {
    this.partial += chunk.toString();
    let nl: number;
    while ((nl = this.partial.indexOf('\n')) >= 0) {
      this.emit(this.partial.slice(0, nl));
      this.partial = this.partial.slice(nl + 1);
    }
    // A program that never prints a newline (a progress bar) must not grow the buffer forever.
    while (this.partial.length > MAX_LINE) {
      this.emit(this.partial.slice(0, MAX_LINE));
      this.partial = this.partial.slice(MAX_LINE);
    }
  }

  end(): void {
    if (this.partial) this.emit(this.partial);
    this.partial = '';
  }

  private emit(raw: string): void {
    const line = raw.replace(/\r$/, '');
    this.tail.push(line);
    if (this.tail.length > TAIL_LINES) this.tail.splice(0, this.tail.length - TAIL_LINES);
    this.onLine(line);
  }
}
