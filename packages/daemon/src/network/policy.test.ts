import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/protocol';
import { allowsAddress, allowsEch, allowsName, parsePolicy, policyRules, type EgressPolicy } from './policy.js';

function rejects(rule: string, why: RegExp): void {
  assert.throws(
    () => parsePolicy(['example.com', rule]),
    (err: unknown) => {
      assert.ok(err instanceof WarrenError, `expected a WarrenError for '${rule}'`);
      assert.equal(err.code, 'invalid_argument');
      assert.ok(err.message.startsWith(`network.allow: '${rule}' is not a valid rule: `), err.message);
      assert.match(err.message, why);
      return true;
    },
  );
}

const name = (p: EgressPolicy, host: string, port: number) => allowsName(p, host, port).allowed;
const addr = (p: EgressPolicy, address: string, port: number, local: string[] = []) => allowsAddress(p, address, port, local).allowed;

test('parsePolicy accepts every rule form and normalises it', () => {
  const policy = parsePolicy([
    'Example.COM.',
    'pkg.example.com:443',
    '*.GitHub.com',
    '*.files.example.net:443',
    '203.0.113.7',
    '198.51.100.9:5432',
    '10.0.0.0/8',
    '192.168.1.0/24:22',
    '0.0.0.0/0:443',
    '203.0.113.7/32',
    '[::1]:8080',
    '[2001:DB8:0:0::/32]:443',
    '[2001:db8::1]',
    'bücher.de',
    '  padded.example.org  ',
  ]);
  assert.deepEqual(policyRules(policy), [
    'example.com',
    'pkg.example.com:443',
    '*.github.com',
    '*.files.example.net:443',
    '203.0.113.7',
    '198.51.100.9:5432',
    '10.0.0.0/8',
    '192.168.1.0/24:22',
    '0.0.0.0/0:443',
    // '203.0.113.7/32' is the same rule as '203.0.113.7': dropped as a duplicate
    '[::1]:8080',
    '[2001:db8::/32]:443',
    '[2001:db8::1]',
    'xn--bcher-kva.de',
    'padded.example.org',
  ]);
  assert.deepEqual(policy.rules[0], { raw: 'example.com', kind: 'domain', host: 'example.com' });
  assert.deepEqual(policy.rules[2], { raw: '*.github.com', kind: 'suffix', host: 'github.com' });
  assert.deepEqual(policy.rules[4], { raw: '203.0.113.7', kind: 'cidr', network: '203.0.113.7', prefix: 32 });
  assert.deepEqual(policy.rules[7], { raw: '192.168.1.0/24:22', kind: 'cidr', network: '192.168.1.0', prefix: 24, port: 22 });
  assert.deepEqual(policy.rules[10], { raw: '[2001:db8::/32]:443', kind: 'cidr', network: '2001:db8::', prefix: 32, port: 443 });
  // The normalised form parses back to the same policy.
  assert.deepEqual(parsePolicy(policyRules(policy)), policy);
  assert.deepEqual(parsePolicy([]), { rules: [] });
});

test('parsePolicy refuses bad rules with a message naming the first one', () => {
  rejects('', /empty/);
  rejects('exa mple.com', /whitespace/);
  rejects('localhost', /127\.0\.0\.1/);
  rejects('localhost:8080', /IP rule/);
  rejects('app.localhost', /loopback/);
  rejects('*.localhost', /loopback/);
  rejects('intranet', /without a dot/);
  rejects('*', /every name/);
  rejects('*.*.example.com', /leading label/);
  rejects('foo*.example.com', /leading label/);
  rejects('*example.com', /leading label/);
  rejects('-bad.example.com', /label '-bad'/);
  rejects('bad-.example.com', /label 'bad-'/);
  rejects('under_score.example.com', /label 'under_score'/);
  rejects('a..example.com', /empty label/);
  rejects('.example.com', /empty label/);
  rejects(`${'a'.repeat(64)}.com`, /longer than 63/);
  rejects(`${'abcdefghi.'.repeat(26)}com`, /253/);
  rejects('example.com:0', /port '0'/);
  rejects('example.com:65536', /port '65536'/);
  rejects('example.com:https', /port 'https'/);
  rejects('example.com:', /missing port/);
  rejects('example.com:443:80', /more than one ':'/);
  rejects('https://example.com', /not a URL/);
  rejects('example.com/path', /not a path/);
  rejects('1.2.3', /last label must start with a letter/);
  rejects('127.1', /last label must start with a letter/);
  rejects('1.0x7f', /last label must start with a letter/);
  rejects('256.1.1.1', /last label/);
  rejects('1.2.3.4/33', /prefix '\/33'/);
  rejects('1.2.3.4/', /prefix '\/'/);
  rejects('1.2.3.4/-1', /prefix/);
  rejects('01.2.3.4/8', /not an IPv4 address/);
  rejects('10.1.2.3/8', /did you mean 10\.0\.0\.0\/8/);
  rejects('::1', /brackets/);
  rejects('2001:db8::/32', /brackets/);
  rejects('[::1', /matching '\]'/);
  rejects('[::1]443', /after '\]'/);
  rejects('[1.2.3.4]', /only for IPv6/);
  rejects('[::1/129]', /prefix '\/129'/);
  rejects('[2001:db8::1/32]', /did you mean \[2001:db8::\/32\]/);
  rejects('[::ffff:127.0.0.1]', /IPv4-mapped/);
  rejects('[fe80::1%eth0]', /not an IPv6 address/);
  rejects('[example.com]', /not an IPv6 address/);
  // The first bad rule is the one named.
  assert.throws(() => parsePolicy(['ok.example.com', 'bad_', 'also bad']), /'bad_'/);
  assert.throws(() => parsePolicy([42 as unknown as string]), /'42' is not a valid rule: a rule must be a string/);
});

test('parsePolicy allows at most 256 rules', () => {
  const rules = Array.from({ length: 256 }, (_, i) => `host${i}.example.com`);
  assert.equal(parsePolicy(rules).rules.length, 256);
  assert.throws(
    () => parsePolicy([...rules, 'one-more.example.com']),
    (err: unknown) => err instanceof WarrenError && err.code === 'invalid_argument' && /at most 256 rules/.test(err.message),
  );
});

test('an empty policy denies everything', () => {
  const none = parsePolicy([]);
  const decision = allowsName(none, 'example.com', 443);
  assert.equal(decision.allowed, false);
  assert.match(decision.reason, /allows no egress/);
  assert.equal(name(none, '1.1.1.1', 443), false);
  assert.equal(addr(none, '127.0.0.1', 80), false);
});

test('domain rules match exactly, case-insensitively, with or without a trailing dot', () => {
  const p = parsePolicy(['example.com']);
  assert.deepEqual(allowsName(p, 'example.com', 443), { allowed: true, rule: 'example.com', reason: "rule 'example.com' allows example.com:443" });
  assert.equal(name(p, 'EXAMPLE.Com', 80), true);
  assert.equal(name(p, 'example.com.', 80), true);
  assert.equal(name(p, 'www.example.com', 443), false);
  assert.equal(name(p, 'example.com.evil.net', 443), false);
  assert.equal(name(p, 'notexample.com', 443), false);
  assert.equal(name(p, 'example.co', 443), false);
});

test('suffix rules match names below the suffix, not the suffix itself', () => {
  const p = parsePolicy(['*.example.com']);
  assert.equal(name(p, 'www.example.com', 443), true);
  assert.equal(name(p, 'a.b.c.example.com', 443), true);
  assert.equal(name(p, 'WWW.EXAMPLE.COM.', 443), true);
  assert.equal(name(p, 'example.com', 443), false);
  assert.equal(name(p, 'badexample.com', 443), false);
  assert.equal(name(p, 'www.example.com.evil.net', 443), false);
  assert.equal(allowsName(p, 'www.example.com', 443).rule, '*.example.com');
  // Both together cover the name and everything below it.
  assert.equal(name(parsePolicy(['*.example.com', 'example.com']), 'example.com', 443), true);
  // A single-label suffix is allowed.
  assert.equal(name(parsePolicy(['*.dev']), 'web.dev', 443), true);
});

test('ports must match when the rule has one', () => {
  const p = parsePolicy(['api.example.com:443', '*.cdn.example.com:8443', 'any.example.com']);
  assert.equal(name(p, 'api.example.com', 443), true);
  const wrongPort = allowsName(p, 'api.example.com', 80);
  assert.equal(wrongPort.allowed, false);
  assert.match(wrongPort.reason, /other ports/);
  assert.equal(name(p, 'x.cdn.example.com', 8443), true);
  assert.equal(name(p, 'x.cdn.example.com', 443), false);
  assert.equal(name(p, 'any.example.com', 1), true);
  assert.equal(name(p, 'any.example.com', 65535), true);
  // Ports that cannot exist are refused whatever the rules say.
  assert.equal(name(p, 'any.example.com', 0), false);
  assert.equal(name(p, 'any.example.com', 70000), false);
  assert.equal(name(p, 'any.example.com', 44.5), false);
});

test('IP literal hosts match only IP rules; names match only name rules', () => {
  const p = parsePolicy(['203.0.113.0/24:443', 'example.com', '[2001:db8::/32]']);
  assert.equal(name(p, '203.0.113.7', 443), true);
  assert.equal(allowsName(p, '203.0.113.7', 443).rule, '203.0.113.0/24:443');
  assert.equal(name(p, '203.0.113.7', 80), false);
  assert.equal(name(p, '203.0.114.1', 443), false);
  // An IPv4-mapped IPv6 literal is the IPv4 address.
  assert.equal(name(p, '::ffff:203.0.113.7', 443), true);
  assert.equal(name(p, '[::ffff:cb00:7107]', 443), true);
  assert.equal(name(p, '2001:db8::5', 22), true);
  assert.equal(name(p, '[2001:DB8::5]', 22), true);
  assert.equal(name(p, '[2001:db9::5]', 22), false);
  // An IP rule does not allow a name, even one that would resolve into it, and vice versa.
  assert.equal(name(parsePolicy(['93.184.216.34']), 'example.com', 443), false);
  assert.equal(name(parsePolicy(['1.1.1.1']), 'one.one.one.one', 443), false);
  // Numeric forms that resolvers read as addresses are not names, so no name rule matches.
  const suffix = parsePolicy(['*.example.com']);
  for (const host of ['127.1', '2130706433', '0x7f.0.0.1', '1.0x7f', '127.0.0.1.']) assert.equal(name(suffix, host, 80), false, host);
  // Garbage is refused with a reason, never matched by suffix.
  const garbage = allowsName(suffix, 'evil example.com', 80);
  assert.equal(garbage.allowed, false);
  assert.match(garbage.reason, /not a valid host name/);
  assert.equal(name(suffix, 'x\u0000.example.com', 80), false);
  assert.equal(name(suffix, '', 80), false);
  // Underscores appear in real host names and are accepted in hosts.
  assert.equal(name(suffix, '_acme.example.com', 443), true);
});

test('allowsAddress allows public addresses: the name decision already happened', () => {
  const p = parsePolicy(['example.com']);
  assert.deepEqual(allowsAddress(p, '93.184.216.34', 443, []), { allowed: true, reason: '93.184.216.34 is not a local address' });
  assert.equal(addr(p, '2606:2800:220:1:248:1893:25c8:1946', 443), true);
  assert.equal(addr(p, '10.1.2.3', 443), true);
});

test('allowsAddress refuses loopback, unspecified, link-local, multicast and host addresses', () => {
  const p = parsePolicy(['example.com', '*.example.org']);
  const local = ['192.168.1.20', 'fe80::1234%eth0', '2001:db8::20'];
  const refused: Array<[string, RegExp]> = [
    ['127.0.0.1', /loopback/],
    ['127.255.0.9', /loopback/],
    ['::1', /loopback/],
    ['0:0:0:0:0:0:0:1', /loopback/],
    ['::ffff:127.0.0.1', /127\.0\.0\.1 is a loopback/],
    ['0.0.0.0', /unspecified/],
    ['0.1.2.3', /unspecified/],
    ['::', /unspecified/],
    ['169.254.169.254', /link-local/],
    ['fe80::1', /link-local/],
    ['fe80::1%eth0', /link-local/],
    ['febf::1', /link-local/],
    ['224.0.0.1', /multicast/],
    ['239.255.255.250', /multicast/],
    ['ff02::1', /multicast/],
    ['255.255.255.255', /broadcast/],
    ['192.168.1.20', /host-local/],
    ['::ffff:192.168.1.20', /host-local/],
    ['2001:db8:0::20', /host-local/],
  ];
  for (const [address, why] of refused) {
    const decision = allowsAddress(p, address, 443, local);
    assert.equal(decision.allowed, false, address);
    assert.match(decision.reason, why, address);
  }
  assert.equal(addr(p, '192.168.1.21', 443, local), true);
  assert.equal(addr(p, 'fec0::1', 443, local), true);
  assert.equal(addr(p, 'not-an-ip', 443, local), false);
  assert.throws(() => allowsAddress(p, '8.8.8.8', 443, ['eth0']), /local address 'eth0'/);
});

test('a narrow IP rule opens a local address on purpose; a broad one does not', () => {
  const local = ['192.168.1.20'];
  const exact = parsePolicy(['127.0.0.1:8080']);
  const decision = allowsAddress(exact, '127.0.0.1', 8080, local);
  assert.equal(decision.allowed, true);
  assert.match(decision.reason, /rule '127\.0\.0\.1:8080' explicitly allows loopback/);
  assert.equal(addr(exact, '127.0.0.1', 8081, local), false);
  assert.equal(addr(exact, '127.0.0.2', 8080, local), false);
  assert.equal(addr(exact, '::ffff:127.0.0.1', 8080, local), true);
  assert.equal(addr(parsePolicy(['127.0.0.0/8']), '127.9.9.9', 22, local), true);
  assert.equal(addr(parsePolicy(['192.168.1.20:9000']), '192.168.1.20', 9000, local), true);
  assert.equal(addr(parsePolicy(['169.254.169.254:80']), '169.254.169.254', 80, local), true);
  assert.equal(addr(parsePolicy(['[::1]:3000']), '::1', 3000, local), true);
  assert.equal(addr(parsePolicy(['[fe80::/10]']), 'fe80::1', 3000, local), true);
  // Wider than /8: the public internet, not the host.
  for (const broad of ['0.0.0.0/0', '0.0.0.0/1', '64.0.0.0/2', '[::/0]']) {
    const p = parsePolicy([broad]);
    assert.equal(addr(p, '127.0.0.1', 80, local), false, broad);
    assert.equal(addr(p, '::1', 80, local), false, broad);
    assert.equal(addr(p, '0.0.0.0', 80, local), false, broad);
    assert.equal(addr(p, '169.254.169.254', 80, local), false, broad);
    assert.equal(addr(p, '192.168.1.20', 80, local), false, broad);
    assert.equal(addr(p, '93.184.216.34', 80, local), true, broad);
  }
  // An IP literal host passes allowsName by rule and allowsAddress only if the rule is narrow.
  const all = parsePolicy(['0.0.0.0/0']);
  assert.equal(name(all, '127.0.0.1', 80), true);
  assert.equal(addr(all, '127.0.0.1', 80, local), false);
  // A name rule never opens a local address (DNS rebinding).
  assert.equal(addr(parsePolicy(['rebind.example.com']), '127.0.0.1', 443, local), false);
});

test('ech: rules allow their name like any name rule, and Encrypted Client Hello to it; no other rule does', () => {
  const p = parsePolicy(['ech:Front.Example.com:443', 'ech:*.cdn.example.net', 'plain.example.com:443', '203.0.113.7']);
  assert.deepEqual(policyRules(p), ['ech:front.example.com:443', 'ech:*.cdn.example.net', 'plain.example.com:443', '203.0.113.7']);
  assert.equal(name(p, 'front.example.com', 443), true);
  assert.equal(allowsEch(p, 'front.example.com', 443), true);
  assert.equal(allowsEch(p, 'FRONT.example.com.', 443), true);
  assert.equal(allowsEch(p, 'front.example.com', 8443), false);
  assert.equal(allowsEch(p, 'a.cdn.example.net', 8443), true);
  assert.equal(allowsEch(p, 'cdn.example.net', 443), false);
  assert.equal(allowsEch(p, 'plain.example.com', 443), false);
  assert.equal(allowsEch(p, '203.0.113.7', 443), false);
  rejects('ech:203.0.113.7:443', /ech: goes before a host name/);
  rejects('ech:db:app', /ech: goes before a host name/);
  rejects('ech:ech:a.example.com', /ech: goes before a host name/);
  rejects('ech:', /empty/);
});
