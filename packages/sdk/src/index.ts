export { Sandbox, type ExecOptions, type BackgroundOptions, type CreateOptions, type ForkOptions } from './sandbox.js';
export { Snapshots } from './snapshots.js';
export type {
  SnapshotInfo,
  ForkResult,
  NetworkPolicy,
  NetworkPolicyView,
  CredentialRule,
  EgressEntry,
  PortForward,
  SandboxDatabase,
  AttachedDatabase,
} from '@warren/protocol';
export { Files, type FileOptions, type WriteData } from './files.js';
export { FileWatch, type FileWatchEvent, type WatchOptions } from './watch.js';
export type { WatchChange } from '@warren/protocol';
export { Processes, ProcessHandle, type OutputCallbacks } from './processes.js';
export type { StdinData } from './stdin.js';
export { HttpClient, resolveApiKey, type ConnectionOptions } from './client.js';
export * from './errors.js';
export type { ExecResult, SandboxInfo, FileStat, ProcessInfo, ProcessOutput, Resources } from '@warren/protocol';
export { Template, TemplateBuildError, type BuildOptions, type TemplateBuildErrorOptions } from './template.js';
export type { Recipe, RecipeStep, TemplateBuildEvent, TemplateInfo, TemplateNetwork } from '@warren/protocol';
export { getPool, setPoolSize, getBake, bake } from './warm.js';
export type { PoolInfo, BakeInfo, BootKind } from '@warren/protocol';
export { getUsage, type UsageOptions } from './usage.js';
export { dashboardLoginLink } from './ui.js';
export type { UiLoginLink } from '@warren/protocol';
export type { UsageReport, UsageTotals, SandboxUsage, ApiKeyUsage, UsagePrices } from '@warren/protocol';
export { getDaemonLogs, LOG_LEVELS, type LogsOptions } from './logs.js';
export type { LogEntry, LogLevel, LogsResponse } from '@warren/protocol';
export { Toolset, bestOf, type ToolsetOptions, type AttemptOutcome } from './tools.js';
export type { ToolResult, BashOutput, EditOutput, ToolFailure, ToolFormat, AnthropicToolSchema, OpenAiToolSchema } from '@warren/protocol';
export type { HealthInfo, RunscInfo } from '@warren/protocol';
export { Pty, PtyHandle, type PtyCreateOptions, type PtyConnectOptions, type PtyOutputOptions } from './pty.js';
export type { TerminalInfo } from '@warren/protocol';
export type { DirOptions } from './files.js';
export type { DirProgress } from './dirs.js';
export { extractDir, packDir } from './dirs.js';
export { Database, type DatabaseCreateOptions } from './databases.js';
export type { DatabaseInfo, DatabaseUrl } from '@warren/protocol';
export { ApiKeys, getAuditTrail, type AuditOptions } from './keys.js';
export type {
  ApiKeyInfo,
  NewApiKey,
  CreateKeyRequest,
  KeyQuotas,
  Scope,
  ApiAuditEntry,
  NewSandboxToken,
  SandboxTokenInfo,
  SandboxTokenScope,
} from '@warren/protocol';
export { SANDBOX_TOKEN_SCOPES } from '@warren/protocol';
export { SCOPES, DEFAULT_SCOPES } from '@warren/protocol';
