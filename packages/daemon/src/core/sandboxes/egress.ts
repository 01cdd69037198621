/**
 * A sandbox's egress: the policy a create resolves, the proxy's parsed view of it, the
 * tunnels the sandbox opens, and the TCP forwarders and hints its agent is told about.
 */
import type { Duplex } from 'node:stream';
import {
  CONNECT_HELPER_PATH,
  EGRESS_PROXY_PORT,
  WarrenError,
  type GuestOps,
  type NetworkPolicy,
  type NetworkPolicyView,
  type TcpForward,
} from '@warren/protocol';
import { parsePolicy, type EgressPolicy } from '../../network/policy.js';
import { Presets } from '../../network/presets.js';
import { credentialRules, parseCredentials, redactedCredentials } from '../../network/credentials.js';
import { asConnect, connectHints, tcpForwards } from '../../network/forwards.js';
import type { NetworkGiven, SandboxRecord } from '../registry.js';
import {
  AGENT_READY_TIMEOUT_MS,
  type EgressCaStore,
  type EgressServer,
  type PolicyFields,
  type SandboxContext,
  type SandboxServiceOptions,
} from './context.js';
import type { Channels } from './channels.js';

/** What every command inside sees: clients find the egress proxy through these. */
const PROXY_URL = `http://127.0.0.1:${EGRESS_PROXY_PORT}`;
export const PROXY_ENV: Record<string, string> = {
  HTTP_PROXY: PROXY_URL,
  HTTPS_PROXY: PROXY_URL,
  http_proxy: PROXY_URL,
  https_proxy: PROXY_URL,
  NO_PROXY: 'localhost,127.0.0.1,::1',
  no_proxy: 'localhost,127.0.0.1,::1',
  // git over ssh goes through the same proxy and policy (docs/network.md).
  GIT_SSH_COMMAND: `ssh -o ProxyCommand="${CONNECT_HELPER_PATH} %h %p"`,
};

export class SandboxEgress {
  private readonly opts: SandboxServiceOptions;
  private readonly presets: Presets;
  /** Parsed egress policies, by sandbox, with the rules they were parsed from. */
  private policies = new Map<string, { rules: string; policy: EgressPolicy }>();

  constructor(
    ctx: SandboxContext,
    private channels: Channels,
  ) {
    this.opts = ctx.opts;
    this.presets = ctx.opts.presets ?? new Presets();
  }

  /** Drops the parsed policy of a sandbox that is gone. */
  forget(id: string): void {
    this.policies.delete(id);
  }

  /** An egress connection from the sandbox; one from a TCP forwarder enters the proxy as a CONNECT. */
  serveTunnel(egress: EgressServer, id: string, conn: Duplex, forward: TcpForward | undefined): void {
    let client = conn;
    if (forward) {
      try {
        client = asConnect(conn, forward);
      } catch (err) {
        this.opts.log.warn({ sandbox: id, err: (err as Error).message }, 'egress: forwarded connection refused');
        return;
      }
    }
    egress.serve(client, id, () => this.policyOf(id));
  }

  /**
   * Sends the agent the TCP forwarders and CONNECT hints the sandbox's policy gives now (network/forwards.ts).
   * The list is read when the call is sent, and the agent applies calls in order, so the
   * last policy set wins. Forwards are a convenience on top of the proxy, which enforces the
   * policy whatever the agent listens on: a forward the agent could not open is logged.
   */
  async pushForwards(id: string, skipIfNone = false): Promise<void> {
    const policy = this.policyOf(id);
    const forwards = tcpForwards(policy);
    const hints = connectHints(policy);
    if (skipIfNone && forwards.length === 0 && hints.length === 0) return;
    let result: GuestOps['net.forwards']['result']['forwards'];
    try {
      ({ forwards: result } = await this.channels.guestOf(id).request('net.forwards', { forwards, connectHints: hints }, AGENT_READY_TIMEOUT_MS));
    } catch (err) {
      // An image saved before forwarders existed (a snapshot, a hibernated sandbox) carries
      // an agent without them: it keeps working through the proxy alone.
      if (!(err instanceof WarrenError && err.code === 'invalid_argument' && err.message.startsWith('unknown guest operation'))) throw err;
      this.opts.log.warn({ sandbox: id }, 'the sandbox agent predates TCP forwarders; only proxy clients reach outside');
      return;
    }
    const failed = result.filter((f) => f.error);
    if (failed.length) this.opts.log.warn({ sandbox: id, failed }, 'some TCP forwarders could not be opened inside the sandbox');
  }

  /** The sandbox's egress policy as the proxy applies it (nothing allowed when unknown). */
  private policyOf(id: string): EgressPolicy {
    const r = this.opts.registry.get(id);
    const rules = r?.network ?? [];
    const key = `${rules.join('\n')}\n${JSON.stringify(r?.credentials ?? [])}`;
    let cached = this.policies.get(id);
    if (!cached || cached.rules !== key) {
      const policy = parsePolicy(rules);
      policy.credentials = parseCredentials(r?.credentials, policy);
      cached = { rules: key, policy };
      this.policies.set(id, cached);
    }
    return cached.policy;
  }

  /**
   * The egress fields of a new sandbox: the request's policy if it gives one (even an empty
   * list), else its template's default, else the daemon's (WARREN_DEFAULT_ALLOW), else none.
   */
  async createPolicy(
    requested: NetworkPolicy | undefined,
    template: string,
    templateDefault: { allow: string[] } | undefined,
    granted: string[] = [],
  ): Promise<PolicyFields> {
    return withGrantedRules(await this.requestedPolicy(requested, template, templateDefault), granted);
  }

  private async requestedPolicy(
    requested: NetworkPolicy | undefined,
    template: string,
    templateDefault: { allow: string[] } | undefined,
  ): Promise<PolicyFields> {
    if (requested) return this.policyFields(requested);
    if (templateDefault) return this.policyFields(templateDefault, 'template', `template '${template}' network.allow`);
    if (this.opts.defaultAllow) return this.policyFields({ allow: this.opts.defaultAllow }, 'daemon', 'WARREN_DEFAULT_ALLOW');
    return { network: [] };
  }

  /**
   * A policy's allow rules (presets expanded) and credentials, validated: 400 naming a bad
   * rule, field or unknown preset, 409 for a preset this host's configuration gives no hosts.
   */
  async policyFields(policy: NetworkPolicy, from?: NetworkGiven['default'], field = 'network.allow'): Promise<PolicyFields> {
    const expanded = await this.presets.expand(policy.allow, field);
    const credentials = credentialRules(parseCredentials(policy.credentials, parsePolicy(expanded.rules)));
    const named = Object.keys(expanded.presets).length > 0;
    const given: NetworkGiven | undefined =
      named || from ? { allow: expanded.given, ...(named ? { presets: expanded.presets } : {}), ...(from ? { default: from } : {}) } : undefined;
    return { network: expanded.rules, ...(given ? { networkGiven: given } : {}), ...(credentials.length ? { credentials } : {}) };
  }

  caStore(): EgressCaStore {
    if (!this.opts.egressCa) throw new WarrenError('failed_precondition', 'this daemon has no egress CA store: credentials are not supported');
    return this.opts.egressCa;
  }
}

/**
 * The policy with rules the daemon grants itself (`db:ALIAS` for the databases a sandbox
 * uses) added. They show in the allow list like any rule; a policy that had been a default
 * is no longer only that default.
 */
export function withGrantedRules(p: PolicyFields, granted: string[]): PolicyFields {
  const missing = granted.filter((rule) => !p.network.includes(rule));
  if (!missing.length) return p;
  const given = p.networkGiven && { allow: [...p.networkGiven.allow, ...missing], ...(p.networkGiven.presets ? { presets: p.networkGiven.presets } : {}) };
  return { network: [...p.network, ...missing], ...(given ? { networkGiven: given } : {}), ...(p.credentials ? { credentials: p.credentials } : {}) };
}

/**
 * The policy as GET and PUT show it: the allow list as given, the expansion when it names
 * presets, whose default it is, and credential headers by name only.
 */
export function networkView(r: SandboxRecord): NetworkPolicyView {
  const given = r.networkGiven;
  return {
    allow: given?.allow ?? r.network,
    ...(given?.presets ? { expanded: r.network, presets: given.presets } : {}),
    ...(given?.default ? { default: given.default } : {}),
    ...(r.credentials?.length ? { credentials: redactedCredentials(parseCredentials(r.credentials, parsePolicy(r.network))) } : {}),
  };
}
