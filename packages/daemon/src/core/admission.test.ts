import { test } from 'node:test';
import assert from 'node:assert/strict';
import os from 'node:os';
import { DEFAULT_RESOURCES, RESOURCE_LIMITS, WarrenError } from '@warren/protocol';
import { admitResources, defaultResources, measureHost, type HostCapacity } from './admission.js';

const small: HostCapacity = { cpus: 2, memoryMB: 23040, pids: 8064, diskMB: 100_000, pidMax: 32768 };

function refusal(fn: () => void): WarrenError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof WarrenError);
    assert.equal(err.code, 'invalid_argument');
    return err;
  }
  assert.fail('admitted');
}

test('resources beyond the host are refused, naming the field and the limit', () => {
  assert.equal(refusal(() => admitResources({ ...DEFAULT_RESOURCES, cpus: 64 }, small)).message, "resources.cpus must be at most 2, this host's CPUs (got 64)");
  assert.equal(
    refusal(() => admitResources({ ...DEFAULT_RESOURCES, memoryMB: 262144 }, small)).message,
    "resources.memoryMB must be at most 23040, this host's memory (got 262144)",
  );
  assert.match(
    refusal(() => admitResources({ ...DEFAULT_RESOURCES, pids: 1_000_000 }, small)).message,
    /^resources\.pids must be at most 8064, .*kernel\.pid_max of 32768.* \(got 1000000\)$/,
  );
  assert.match(
    refusal(() => admitResources({ ...DEFAULT_RESOURCES, diskMB: 200_000 }, small)).message,
    /^resources\.diskMB must be at most 100000, the size of the filesystem .* \(got 200000\)$/,
  );
  assert.deepEqual(refusal(() => admitResources({ ...DEFAULT_RESOURCES, cpus: 3 }, small)).details, { field: 'resources.cpus', limit: 2 });
});

test('values the request did not give say where they came from', () => {
  const fromSnapshot = refusal(() => admitResources({ ...DEFAULT_RESOURCES, memoryMB: 65536 }, small, 'snapshot snap-1'));
  assert.match(fromSnapshot.message, /\(got 65536, from snapshot snap-1\)$/);
  const given = refusal(() => admitResources({ ...DEFAULT_RESOURCES, memoryMB: 65536 }, small, 'snapshot snap-1', { memoryMB: 65536 }));
  assert.match(given.message, /\(got 65536\)$/);
});

test('exactly the host is admitted; no capacity means no host check', () => {
  admitResources({ cpus: 2, memoryMB: 23040, pids: 8064, diskMB: 100_000 }, small);
  admitResources({ cpus: 999, memoryMB: 1 << 30, pids: 1 << 20, diskMB: 1 << 30 }, undefined);
});

test('the defaults are cut down to a small host, so a request without resources is admitted', () => {
  assert.deepEqual(defaultResources(small), DEFAULT_RESOURCES);
  const tiny: HostCapacity = { cpus: 1, memoryMB: 1024, pids: 500, diskMB: 5000, pidMax: 2512 };
  const d = defaultResources(tiny);
  assert.deepEqual(d, { cpus: 1, memoryMB: 1024, pids: 500, diskMB: 5000 });
  admitResources(d, tiny);
  assert.deepEqual(defaultResources(undefined), DEFAULT_RESOURCES);
});

test('this host: measured capacity admits the defaults and stays within the static bounds', () => {
  const host = measureHost(os.tmpdir());
  assert.equal(host.cpus, os.availableParallelism());
  assert.ok(host.memoryMB > 0 && host.memoryMB <= os.totalmem() / 1024 / 1024);
  assert.ok(host.pids > 0 && host.pids < host.pidMax);
  assert.ok(host.diskMB > 0);
  admitResources(defaultResources(host), host);
  assert.ok(RESOURCE_LIMITS.cpus.min <= host.cpus);
});
