/** The demo's progress lines: `[  12.3s] text`, seconds since this module loaded. */
const started = performance.now();

export function say(line: string): void {
  process.stdout.write(`[${((performance.now() - started) / 1000).toFixed(1).padStart(5)}s] ${line}\n`);
}
