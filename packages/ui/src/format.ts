/** How numbers and times read on the pages. */
export function bytes(n: number | undefined): string {
  if (n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v < 10 && u > 0 ? v.toFixed(1) : Math.round(v)} ${units[u]}`;
}

/** A duration in seconds as its two largest units ("3h 12m"). */
export function duration(seconds: number): string {
  if (seconds < 0) return 'expired';
  const s = Math.floor(seconds);
  const parts: [number, string][] = [
    [Math.floor(s / 86400), 'd'],
    [Math.floor((s % 86400) / 3600), 'h'],
    [Math.floor((s % 3600) / 60), 'm'],
    [s % 60, 's'],
  ];
  const first = parts.findIndex(([v]) => v > 0);
  if (first < 0) return '0s';
  return parts
    .slice(first, first + 2)
    .filter(([v]) => v > 0)
    .map(([v, unit]) => `${v}${unit}`)
    .join(' ');
}

export function age(iso: string, now: number): string {
  return duration((now - Date.parse(iso)) / 1000);
}

export function percent(cores: number | undefined): string {
  return cores === undefined ? '–' : `${(cores * 100).toFixed(cores < 0.1 ? 1 : 0)}%`;
}

export function time(iso: string): string {
  return new Date(iso).toLocaleString();
}
