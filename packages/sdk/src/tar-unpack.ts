/**
 * Extracts a hostile tar stream (a download: it comes from inside a sandbox, whose root can
 * replace the template's tar) into an empty directory with node-tar, deciding on what node-tar
 * itself reads. Three checks, each enough on its own for what it covers:
 *
 * 1. every byte passes the strict TarChecker first, which refuses any framing two readers could
 *    read differently (the rules: docs/api.md, "Directories");
 * 2. each entry node-tar parsed is run through the member rules before node-tar writes it
 *    (its `filter`, called as the header is parsed, before the entry is queued for writing),
 *    and must be the very member the checker saw at that place: a member hidden from one of
 *    the two parsers is refused, never skipped;
 * 3. the caller walks the written tree before it is placed (tree-check.ts).
 *
 * Symlinks are made last, by this module, from node-tar's entries (GNU tar delays the
 * dangerous ones the same way): while node-tar writes, the tree holds no symlink at all, so
 * nothing can be written through one. node-tar's own check of a new link's target (it refuses
 * one whose target passes through an existing symlink, `view -> vi` after `vi -> vim`) would
 * also refuse trees the rules accept.
 *
 * node-tar runs synchronously (UnpackSync): when a check refuses, no write is still in flight,
 * so the caller's removal of the directory is the last thing that touches it.
 */
import { mkdirSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { UnpackSync, type ReadEntry } from 'tar';
import { TarChecker, TarMembers, WarrenError, memberComponents, refuseMember, type TarMember, type TarMemberType } from '@warren/protocol';

/** node-tar's entry types, as member types; any other is refused. */
const ENTRY_TYPES: Record<string, TarMemberType> = { File: 'file', OldFile: 'file', Directory: 'directory', SymbolicLink: 'symlink', Link: 'hardlink' };

function asMember(entry: ReadEntry): TarMember {
  const type = ENTRY_TYPES[entry.type];
  if (!type) throw refuseMember(entry.path, `unsupported member type ${JSON.stringify(entry.type)} (only files, directories, symlinks and hard links)`);
  return { name: entry.path, type, linkname: entry.linkpath ?? '', size: entry.size };
}

function describe(m: TarMember | undefined): string {
  return m ? `${m.type} ${JSON.stringify(m.name)}${m.linkname ? ` -> ${JSON.stringify(m.linkname)}` : ''} (${m.size} bytes)` : 'nothing';
}

/**
 * Passes bytes on once the checker accepted them. A metadata record (pax or GNU long name) is
 * held back until it is whole: node-tar decodes each piece of one as UTF-8 on its own, so a
 * character cut between two network chunks would come out mangled.
 */
function checked(checker: TarChecker, onBytes: (bytes: number) => void): Transform {
  let seen = 0;
  let held: Buffer | undefined;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      try {
        checker.push(chunk);
      } catch (err) {
        done(err as Error);
        return;
      }
      seen += chunk.length;
      onBytes(seen);
      const data = held ? Buffer.concat([held, chunk]) : chunk;
      const keep = seen - (checker.openMetaAt ?? seen);
      held = keep ? data.subarray(data.length - keep) : undefined;
      done(null, keep === data.length ? undefined : data.subarray(0, data.length - keep));
    },
    flush(done) {
      try {
        checker.end();
        done();
      } catch (err) {
        done(err as Error);
      }
    },
  });
}

/**
 * Extracts `source` into the existing, empty directory `dir`. Rejects with the refusal (a
 * WarrenError naming the member) on the first member either check refuses; what was written
 * of earlier members is left for the caller to remove. Modes are kept less the umask; owners
 * never.
 */
export async function unpackChecked(source: Readable, dir: string, onProgress?: (bytes: number, entries: number) => void): Promise<void> {
  const checkerSaw: TarMember[] = [];
  const checker = new TarChecker((m) => checkerSaw.push(m));
  const rules = new TarMembers();
  let entries = 0;
  let refusal: Error | undefined;
  const symlinks: TarMember[] = [];
  const unpack = new UnpackSync({
    cwd: dir,
    strict: true,
    preservePaths: false,
    preserveOwner: false,
    // Called as node-tar parses each header, before the entry is queued for writing; an
    // Unpack's entries are always ReadEntry objects.
    filter: (_path, e) => {
      if (refusal) return false;
      try {
        const read = asMember(e as ReadEntry);
        rules.add(read);
        const saw = checkerSaw.shift();
        if (describe(read) !== describe(saw))
          throw new WarrenError(
            'invalid_argument',
            `refused tar archive: its member ${entries + 1} reads as ${describe(saw)} to the check and as ${describe(read)} to node-tar`,
          );
        entries++;
        if (read.type !== 'symlink') return true;
        symlinks.push(read); // made after every other entry: the file comment says why
        return false;
      } catch (err) {
        refusal = err as Error;
        // Stops the parse; the error it emits ends the pipeline, and `refusal` is what the caller gets.
        unpack.abort(new Error('refused'));
        return false;
      }
    },
  });
  try {
    await pipeline(
      source,
      checked(checker, (bytes) => onProgress?.(bytes, entries)),
      unpack as unknown as NodeJS.WritableStream,
    );
  } catch (err) {
    if (refusal) throw refusal;
    // node-tar's own errors (strict: any entry it could not write) carry a tarCode.
    if (err instanceof Error && 'tarCode' in err)
      throw new WarrenError('invalid_argument', `refused tar archive: node-tar could not extract it: ${err.message}`);
    throw err;
  }
  if (refusal) throw refusal;
  if (checkerSaw.length)
    throw new WarrenError('invalid_argument', `refused tar archive: node-tar did not read ${describe(checkerSaw[0])}, which the check saw`);
  rules.end();
  // Parents exist unless the archive named none: mkdir -p, through directories only (no
  // symlink exists yet, and the rules refuse a member under a non-directory).
  for (const link of symlinks) {
    const at = path.join(dir, ...memberComponents(link.name));
    mkdirSync(path.dirname(at), { recursive: true });
    symlinkSync(link.linkname, at);
  }
}
