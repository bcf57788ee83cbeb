/**
 * The agent log lines that explain a share's state (pure): of the last lines of the
 * agent container's log, the latest warn, error and fatal lines (the agent writes why it
 * fenced, lost or cannot take the lease at those levels: agent/README.md), else the
 * latest lines of any level, each made readable on one line.
 *
 * The agent writes one JSON object a line (agent/agent-logger.ts: level label, time,
 * bindings, fields, msg); a line that is not such an object is shown as it is. Each
 * line is cut at MAX_LINE characters so one huge field cannot flood the terminal.
 */

const PROBLEM_LEVELS = new Set(['warn', 'error', 'fatal', 40, 50, 60]);
/** Fields every line has that say nothing about this line. */
const ROUTINE_FIELDS = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'component']);
export const MAX_LINE = 400;

/** At most `max` lines worth showing, oldest first. */
export function logExcerpt(lines: readonly string[], max = 3): string[] {
  const parsed = lines.filter((l) => l.trim() !== '').map(parseLine);
  const problems = parsed.filter((l) => l.problem);
  const chosen = (problems.length > 0 ? problems : parsed).slice(-max);
  return chosen.map((l) => (l.text.length > MAX_LINE ? `${l.text.slice(0, MAX_LINE - 1)}…` : l.text));
}

function parseLine(line: string): { problem: boolean; text: string } {
  let record: Record<string, unknown>;
  try {
    const value: unknown = JSON.parse(line);
    if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error('not an object');
    record = value as Record<string, unknown>;
  } catch {
    return { problem: false, text: line.trim() };
  }
  const fields = Object.entries(record)
    .filter(([key]) => !ROUTINE_FIELDS.has(key))
    .map(([key, value]) => `${key}=${fieldText(value)}`);
  const text = [record.time, record.level, record.msg, ...fields]
    .filter((part) => part !== undefined && part !== '')
    .join(' ');
  return { problem: PROBLEM_LEVELS.has(record.level as string | number), text };
}

/** An error as its message (the stack says nothing to an operator), other values as JSON. */
function fieldText(value: unknown): string {
  if (typeof value === 'string') return /\s/.test(value) ? JSON.stringify(value) : value;
  if (value && typeof value === 'object' && 'message' in value && 'type' in value)
    return JSON.stringify(String((value as { message: unknown }).message));
  return JSON.stringify(value);
}
