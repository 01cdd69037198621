/** Usage: vCPU-seconds, GiB-seconds and cost per day over the last week, and per API key. */
import { useEffect, useRef, useState } from 'preact/hooks';
import { BarController, BarElement, CategoryScale, Chart, Legend, LinearScale, Tooltip } from 'chart.js';
import type { UsageReport } from '@warren/protocol';
import { api } from '../api.js';
import { Alert, TableHead } from '../parts.js';

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Tooltip, Legend);

const DAYS = 7;

/** Dollars, with the digits a small amount needs (a test run costs fractions of a cent). */
function usd(amount: number): string {
  return `$${amount.toFixed(amount > 0 && amount < 1 ? 4 : 2)}`;
}
const DAY_MS = 86_400_000;

interface Day {
  label: string;
  report: UsageReport;
}

function BarChart({ title, labels, series }: { title: string; labels: string[]; series: { label: string; data: number[]; color: string }[] }) {
  const canvas = useRef<HTMLCanvasElement>(null);
  useEffect(() => {
    if (!canvas.current) return;
    const chart = new Chart(canvas.current, {
      type: 'bar',
      data: { labels, datasets: series.map((s) => ({ label: s.label, data: s.data, backgroundColor: s.color })) },
      options: { responsive: true, maintainAspectRatio: false, animation: false, plugins: { legend: { position: 'bottom' } } },
    });
    return () => chart.destroy();
  }, [labels, series]);
  return (
    <figure class="chart">
      <figcaption>{title}</figcaption>
      <div class="chart-box">
        <canvas ref={canvas} role="img" aria-label={title} />
      </div>
    </figure>
  );
}

export function UsagePage({ admin }: { admin: boolean }) {
  const [days, setDays] = useState<Day[] | undefined>();
  const [week, setWeek] = useState<UsageReport | undefined>();
  const [error, setError] = useState('');
  useEffect(() => {
    const end = Date.now();
    const startOfToday = new Date(end);
    startOfToday.setHours(0, 0, 0, 0);
    const since = (i: number) => startOfToday.getTime() - (DAYS - 1 - i) * DAY_MS;
    const ask = (from: number, to: number) => api<UsageReport>('GET', `/v1/usage?since=${new Date(from).toISOString()}&until=${new Date(to).toISOString()}`);
    Promise.all(
      Array.from({ length: DAYS }, async (_, i) => ({
        label: new Date(since(i)).toLocaleDateString(undefined, { weekday: 'short', day: 'numeric' }),
        report: await ask(since(i), Math.min(since(i) + DAY_MS, end)),
      })),
    ).then(setDays, (e: Error) => setError(e.message));
    ask(since(0), end).then(setWeek, (e: Error) => setError(e.message));
  }, []);
  if (error) return <Alert text={error} />;
  if (!days || !week) return <p class="loading">Loading…</p>;
  const labels = days.map((d) => d.label);
  const keys = week.apiKeys;
  return (
    <section aria-labelledby="usage-title">
      <h1 id="usage-title">Usage</h1>
      <p>
        Last {DAYS} days: {week.total.vcpuSeconds.toFixed(0)} vCPU-seconds, {week.total.gibSeconds.toFixed(0)} GiB-seconds, {usd(week.total.cost)} over {week.total.sandboxes} sandboxes (at ${week.prices.vcpuHour}/vCPU-hour, ${week.prices.gibHour}/GiB-hour).
      </p>
      <div class="charts">
        <BarChart
          title="Cost per day (USD)"
          labels={labels}
          series={[{ label: 'cost', data: days.map((d) => d.report.total.cost), color: '#c0632b' }]}
        />
        <BarChart
          title="Allocation per day"
          labels={labels}
          series={[
            { label: 'vCPU-seconds', data: days.map((d) => d.report.total.vcpuSeconds), color: '#3b6ea5' },
            { label: 'GiB-seconds', data: days.map((d) => d.report.total.gibSeconds), color: '#6aa56a' },
          ]}
        />
        <BarChart
          title={admin ? 'Cost per API key, last 7 days (USD)' : 'Your cost, last 7 days (USD)'}
          labels={keys.map((k) => k.apiKeyId)}
          series={[{ label: 'cost', data: keys.map((k) => k.cost), color: '#8a5fb0' }]}
        />
      </div>
      <table>
        <TableHead columns={['API key', 'Sandboxes', 'vCPU-seconds', 'GiB-seconds', 'Cost (USD)']} />
        <tbody>
          {keys.map((k) => (
            <tr key={k.apiKeyId}>
              <td>{k.apiKeyId}</td>
              <td>{k.sandboxes}</td>
              <td>{k.vcpuSeconds.toFixed(0)}</td>
              <td>{k.gibSeconds.toFixed(0)}</td>
              <td>{usd(k.cost)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
