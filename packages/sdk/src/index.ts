export { Sandbox, type ExecOptions, type BackgroundOptions, type CreateOptions } from './sandbox.js';
export { Files, type FileOptions, type WriteData } from './files.js';
export { Processes, ProcessHandle, type OutputCallbacks } from './processes.js';
export { HttpClient, resolveApiKey, type ConnectionOptions } from './client.js';
export * from './errors.js';
export type { ExecResult, SandboxInfo, FileStat, ProcessInfo, ProcessOutput, Resources } from '@warren/protocol';
export { Template, TemplateBuildError, type BuildOptions } from './template.js';
export type { Recipe, RecipeStep, TemplateBuildEvent, TemplateInfo } from '@warren/protocol';
