/**
 * Turns zod's issues into the messages of 400s: each names the field and, for a bound, the
 * limit and what was given ("resources.cpus must be at least 0.1 (got 0.001)"), so a caller
 * can fix the request without reading the schema.
 */
import type { z } from 'zod';
import { BOUND_PARAM } from './api.js';
import { WarrenError } from './errors.js';

type Issue = z.core.$ZodIssue;

/** A message lists this many issues at most; a body with thousands of bad keys says how many more. */
const MAX_LISTED_ISSUES = 5;
/** Field names and keys come from the caller: a 16 MiB key must not come back in full. */
const MAX_SEGMENT_CHARS = 64;

export function issuesText(issues: readonly Issue[]): string {
  const listed = issues.slice(0, MAX_LISTED_ISSUES).map(issueText);
  const more = issues.length - listed.length;
  return listed.join('; ') + (more > 0 ? `; and ${more} more` : '');
}

export function issueText(issue: Issue): string {
  const where = fieldName(issue.path);
  switch (issue.code) {
    case 'too_small':
    case 'too_big':
      return `${where} ${boundText(issue)}`;
    case 'invalid_type':
      if (issue.expected === 'int') return `${where} must be an integer${got(issue.input === undefined ? undefined : valueText(issue.input))}`;
      if (/received undefined$/.test(issue.message)) return `${where} is required`;
      if (issue.input === undefined && !('received' in issue)) return `${where}: ${issue.message}`;
      return `${where} must be ${article(issue.expected)} (got ${kindOf(issue)})`;
    case 'invalid_key': {
      // The path ends with the offending key; what is wrong with it is in the nested issues.
      const owner = fieldName(issue.path.slice(0, -1));
      const why = issue.issues.map((i) => (i.code === 'too_small' || i.code === 'too_big' ? boundText(i) : `is invalid: ${i.message}`));
      return `${owner} key '${truncate(String(issue.path.at(-1) ?? ''))}' ${why.join(' and ')}`;
    }
    case 'unrecognized_keys':
      return `${where} has unknown ${issue.keys.length === 1 ? 'field' : 'fields'} ${issue.keys.map((k) => `'${truncate(k)}'`).join(', ')}`;
    case 'custom':
      // A bound checked by a refinement reads like the others: "metadata must have at most ...".
      return issue.params?.[BOUND_PARAM] === true ? `${where} ${issue.message}` : `${where}: ${issue.message}`;
    default:
      return `${where}: ${issue.message}`;
  }
}

function boundText(issue: Extract<Issue, { code: 'too_small' | 'too_big' }>): string {
  const small = issue.code === 'too_small';
  const limit = Number(small ? issue.minimum : issue.maximum);
  const relation = small ? (issue.inclusive ? 'at least' : 'greater than') : issue.inclusive ? 'at most' : 'less than';
  const input = issue.input as unknown;
  switch (issue.origin) {
    case 'string':
      if (small && limit === 1) return 'must not be empty';
      return `must be ${relation} ${limit} characters long${got(typeof input === 'string' ? input.length : undefined)}`;
    case 'array':
    case 'set':
      return `must have ${relation} ${limit} items${got(Array.isArray(input) ? input.length : undefined)}`;
    default:
      return `must be ${relation} ${limit}${got(input === undefined ? undefined : valueText(input))}`;
  }
}

/** " (got X)", or nothing when the issue did not carry the input (parsed without reportInput). */
function got(value: string | number | undefined): string {
  return value === undefined ? '' : ` (got ${value})`;
}

/** `resources.cpus`, `network.allow.3`, `body` for the request itself. */
export function fieldName(path: readonly PropertyKey[]): string {
  return path.length ? path.map((p) => truncate(String(p))).join('.') : 'body';
}

function valueText(v: unknown): string {
  if (typeof v === 'number' || typeof v === 'bigint' || typeof v === 'boolean') return String(v);
  if (typeof v === 'string') return `'${truncate(v)}'`;
  return v === null ? 'null' : typeof v;
}

function kindOf(issue: Extract<Issue, { code: 'invalid_type' }>): string {
  // zod reports infinities as received "Infinity" (JSON has none; only an SDK could send one).
  const received = (issue as { received?: unknown }).received;
  if (typeof received === 'string') return received;
  const v = issue.input as unknown;
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `${typeof v} ${valueText(v)}`;
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

function truncate(s: string): string {
  return s.length > MAX_SEGMENT_CHARS ? `${s.slice(0, MAX_SEGMENT_CHARS)}…` : s;
}

export function validationError(error: z.ZodError): WarrenError {
  const issues = error.issues.map(issueText);
  return new WarrenError('invalid_argument', issuesText(error.issues), { details: { issues } });
}

export function parse<T extends z.ZodTypeAny>(schema: T, input: unknown): z.output<T> {
  // reportInput: the message says what was given ("got 0.001"); it never leaves this module.
  const r = schema.safeParse(input, { reportInput: true });
  if (!r.success) throw validationError(r.error);
  return r.data;
}
