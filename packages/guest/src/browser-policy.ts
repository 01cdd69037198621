/**
 * A managed Chromium policy that keeps Encrypted Client Hello off in the sandbox's browsers.
 *
 * The egress proxy refuses a TLS ClientHello that carries ECH unless a rule allows it (docs/network.md):
 * it cannot read the encrypted inner name, so an allowed front could carry any site behind it.
 * Chromium (and Chrome, Playwright's and Puppeteer's builds) sends a GREASE ECH extension in every
 * ClientHello, through a proxy too (measured with Chromium 156), which no proxy can tell from a
 * real one: without this policy every HTTPS page a browser in a sandbox opens would be refused.
 * With it, Chromium sends no ECH at all (measured likewise).
 *
 * Written only where no file of that name is: root inside may change or remove it (to use ECH
 * under an `ech:` rule, set the value to true), and the agent never overwrites its choice.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** Where Chromium and Google Chrome on Linux read managed policies from. */
const POLICY_DIRS = ['/etc/chromium/policies/managed', '/etc/opt/chrome/policies/managed'];
const POLICY_FILE = 'warren-egress.json';
const POLICY = `${JSON.stringify({ EncryptedClientHelloEnabled: false }, null, 2)}\n`;

export function writeBrowserPolicy(dirs: readonly string[] = POLICY_DIRS): void {
  for (const dir of dirs) {
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    try {
      // 'wx': O_EXCL, so an existing file, or a symlink in its place, is left alone.
      writeFileSync(path.join(dir, POLICY_FILE), POLICY, { flag: 'wx', mode: 0o644 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
}
