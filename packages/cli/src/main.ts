/** The `warren` command line. */
import { buildProgram, failure } from './program.js';

buildProgram()
  .parseAsync(process.argv)
  .catch((err: unknown) => {
    const { message, exitCode } = failure(err);
    process.stderr.write(message);
    process.exit(exitCode);
  });
