import { test } from 'node:test';
import assert from 'node:assert/strict';
import { policyLines } from './network.js';

test('warren net prints rules as given, each preset with its expansion below it', () => {
  assert.equal(
    policyLines({
      allow: ['@github', 'api.example.com:443'],
      expanded: ['github.com:443', '*.github.com:443', 'api.example.com:443'],
      presets: { '@github': ['github.com:443', '*.github.com:443'] },
      credentials: [{ host: 'api.example.com:443', headers: { authorization: '[redacted]' } }],
    }),
    [
      'allow @github, which expands to:',
      '    github.com:443',
      '    *.github.com:443',
      'allow api.example.com:443',
      'credential api.example.com:443: authorization (values are kept by the daemon)',
      '',
    ].join('\n'),
  );
  assert.equal(policyLines({ allow: ['pkg.example.com'], default: 'daemon' }), "(the daemon's default policy)\nallow pkg.example.com\n");
  assert.equal(policyLines({ allow: [], default: 'template' }), "(the template's default policy)\nnothing allowed (all egress is refused)\n");
  assert.equal(policyLines({ allow: [] }), 'nothing allowed (all egress is refused)\n');
});
