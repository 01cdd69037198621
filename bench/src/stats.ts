/** Percentiles, result rows, target checks and the printed report. */

type Unit = 'ms' | 'µs' | 'MB' | 'MiB/s' | 'bytes' | '% core' | 'tps';

export interface Row {
  /** Stable key other rows refer to as their baseline. */
  key: string;
  suite: string;
  label: string;
  unit: Unit;
  values: number[];
  /** Key of the row this one is compared with (p50 / p50 of the baseline). */
  baseline?: string;
  /** True for a row that is itself a baseline (printed with a marker). */
  isBaseline?: boolean;
  /** For rows where higher is better (throughput): the tails are the low percentiles. */
  higherIsBetter?: boolean;
  note?: string;
}

export interface Target {
  name: string;
  met: boolean;
  detail: string;
}

/** Linear interpolation between closest ranks (numpy's default). */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p / 100) * (sorted.length - 1);
  const lo = sorted[Math.floor(rank)];
  const hi = sorted[Math.ceil(rank)];
  // Missing only for p outside 0..100.
  if (lo === undefined || hi === undefined) return NaN;
  return lo + (hi - lo) * (rank - Math.floor(rank));
}

interface Summary {
  n: number;
  p50: number;
  p95: number;
  p99: number;
  min: number;
  max: number;
  mean: number;
}

/** p95/p99 are the bad tail: high for times and sizes, low for throughput. */
function summarize(values: number[], higherIsBetter = false): Summary {
  const tail = (p: number) => percentile(values, higherIsBetter ? 100 - p : p);
  return {
    n: values.length,
    p50: percentile(values, 50),
    p95: tail(95),
    p99: tail(99),
    min: Math.min(...values),
    max: Math.max(...values),
    mean: values.reduce((a, b) => a + b, 0) / (values.length || 1),
  };
}

export class Report {
  readonly rows: Row[] = [];
  readonly targets: Target[] = [];
  readonly notes: string[] = [];

  add(row: Row): Row {
    this.rows.push(row);
    return row;
  }

  get(key: string): Row | undefined {
    return this.rows.find((r) => r.key === key);
  }

  p50(key: string): number {
    const r = this.get(key);
    return r ? percentile(r.values, 50) : NaN;
  }

  target(name: string, met: boolean, detail: string): void {
    this.targets.push({ name, met, detail });
  }

  note(text: string): void {
    this.notes.push(text);
  }

  /** Prints one suite's rows as a table. */
  printSuite(suite: string): void {
    const rows = this.rows.filter((r) => r.suite === suite);
    if (!rows.length) return;
    const header = ['measurement', 'n', 'p50', 'p95', 'p99', 'unit', 'ratio (p50 / baseline p50)'];
    const lines: string[][] = [header];
    for (const r of rows) {
      const s = summarize(r.values, r.higherIsBetter);
      let ratio = '';
      if (r.baseline) {
        const b = this.get(r.baseline);
        if (b) ratio = `${fmtRatio(s.p50 / percentile(b.values, 50))} vs ${b.key}`;
      } else if (r.isBaseline) ratio = `[baseline ${r.key}]`;
      lines.push([r.label, String(s.n), fmt(s.p50), fmt(s.p95), fmt(s.p99), r.unit, ratio]);
    }
    const widths = header.map((_, i) => Math.max(...lines.map((l) => (l[i] ?? '').length)));
    const out = lines.map((l) =>
      l
        .map((c, i) => (i === 0 || i >= 5 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0)))
        .join('  ')
        .trimEnd(),
    );
    out.splice(1, 0, widths.map((w) => '-'.repeat(w)).join('  '));
    console.log(`\n== ${suite} ==`);
    console.log(out.join('\n'));
    for (const r of rows) if (r.note) console.log(`  * ${r.label}: ${r.note}`);
  }

  printTargets(): void {
    if (!this.targets.length) return;
    console.log('\n== targets ==');
    for (const t of this.targets) console.log(`${t.met ? 'MET   ' : 'MISSED'}  ${t.name}: ${t.detail}`);
  }

  toJSON(): unknown {
    return {
      rows: this.rows.map((r) => ({ ...r, summary: summarize(r.values, r.higherIsBetter) })),
      targets: this.targets,
      notes: this.notes,
    };
  }
}

export function fmt(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

function fmtRatio(v: number): string {
  return Number.isFinite(v) ? `${v.toFixed(2)}×` : 'n/a';
}
