/**
 * E2B's envd wire types (Connect RPC services Process and Filesystem), compiled from the
 * .proto files in ../../proto/e2b. A subpath of its own, so that whoever does not serve
 * E2B's API (the guest agent, the SDK) does not load protobuf.
 */
export * from './gen/process/process_pb.js';
export {
  EntryInfoSchema,
  EventType,
  FileType,
  Filesystem,
  FilesystemEventSchema,
  ListDirResponseSchema,
  MakeDirResponseSchema,
  MoveResponseSchema,
  RemoveResponseSchema,
  StatResponseSchema,
  WatchDirResponseSchema,
  CreateWatcherResponseSchema,
  GetWatcherEventsResponseSchema,
  RemoveWatcherResponseSchema,
  type EntryInfo,
  type FilesystemEvent,
} from './gen/filesystem/filesystem_pb.js';
export * from './api.js';
