/**
 * Makes a sandbox trust its egress CA (network/ca.ts), so the daemon can terminate TLS for
 * credential hosts: the CA certificate (never its key) is written inside through the agent,
 * and processes started afterwards get the usual variables pointing at bundles that hold it.
 *
 * Written inside, as root:
 *   /etc/warren/egress-ca.pem                          the CA alone (NODE_EXTRA_CA_CERTS)
 *   /usr/local/share/ca-certificates/warren-egress.crt so update-ca-certificates keeps it
 *   /etc/ssl/certs/ca-certificates.crt                 the system bundle, with the CA appended
 *                                                      between marker lines
 * Installing again (a fork gets its own CA; a daemon restart re-binds) replaces the marked
 * block, so the bundle never accumulates CAs of parents. A template without a system bundle
 * gets one holding only the CA.
 */
import { CA_BUNDLE_PATH, EGRESS_CA_PATH, WarrenError } from '@warren/protocol';
import type { GuestClient } from './guest-client.js';
import { runInGuest } from './guest-run.js';

const SCRIPT_TIMEOUT_MS = 20_000;
const BEGIN = '# warren egress CA: begin';
const END = '# warren egress CA: end';

/** What processes inside see once the CA is installed (merged into the sandbox's env). */
export const TRUST_ENV: Record<string, string> = {
  // node keeps its own store and adds these; the others replace their store with the bundle.
  NODE_EXTRA_CA_CERTS: EGRESS_CA_PATH,
  SSL_CERT_FILE: CA_BUNDLE_PATH,
  CURL_CA_BUNDLE: CA_BUNDLE_PATH,
  REQUESTS_CA_BUNDLE: CA_BUNDLE_PATH,
  PIP_CERT: CA_BUNDLE_PATH,
  GIT_SSL_CAINFO: CA_BUNDLE_PATH,
};

// The PEM arrives on stdin; nothing in it is interpreted by the shell.
const SCRIPT = `set -eu
umask 022
mkdir -p /etc/warren /usr/local/share/ca-certificates /etc/ssl/certs
cat > ${EGRESS_CA_PATH}.tmp
mv ${EGRESS_CA_PATH}.tmp ${EGRESS_CA_PATH}
cp ${EGRESS_CA_PATH} /usr/local/share/ca-certificates/warren-egress.crt
b=${CA_BUNDLE_PATH}
touch "$b"
sed '/^${BEGIN}$/,/^${END}$/d' "$b" > "$b.warren-tmp"
{ printf '%s\\n' '${BEGIN}'; cat ${EGRESS_CA_PATH}; printf '\\n%s\\n' '${END}'; } >> "$b.warren-tmp"
mv "$b.warren-tmp" "$b"
`;

/** Installs the CA certificate inside the sandbox; fails with what the script printed. */
export async function installEgressCa(client: GuestClient, caPem: string): Promise<void> {
  const out = await runInGuest(client, {
    argv: ['/bin/sh', '-c', SCRIPT],
    user: 'root',
    cwd: '/',
    stdin: caPem,
    timeoutMs: SCRIPT_TIMEOUT_MS,
    tag: 'warren-egress-ca',
  });
  if (out.exitCode !== 0) {
    throw new WarrenError('internal', `could not install the egress CA in the sandbox (exit ${out.exitCode})`, {
      cause: (out.stderr || out.stdout).slice(-500),
    });
  }
}
