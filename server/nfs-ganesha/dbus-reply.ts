/**
 * Reads the reply `dbus-send --print-reply` prints (pure): the method return's arguments
 * as a tree of values. Only what ganesha's stats and admin methods answer with is needed
 * (booleans, strings, unsigned and signed integers, doubles, structs and arrays), but any
 * basic type dbus-send prints is read.
 *
 * dbus-send's format (dbus-print-message.c of dbus 1.14): a header line `method return
 * time=… sender=… -> destination=… serial=… reply_serial=…`, then one argument a line,
 * indented: `<type> <value>` for a basic type (strings in double quotes, not escaped),
 * `struct {` … `}`, `array [` … `]`, `dict entry(` … `)`, `variant <type> <value>`.
 *
 * Guarantees: an input it cannot read is an error value naming the line, never a
 * partial tree; integers above 2^53 lose precision (a counter of 9·10^15 ns of latency,
 * about 104 days, still reads within a part in 10^15). NB: a string holding a newline
 * cannot be told from the next line; none of the replies read here has one.
 */

export type DbusValue =
  | { kind: 'boolean'; value: boolean }
  | { kind: 'string'; value: string }
  | { kind: 'number'; value: number }
  | { kind: 'struct'; items: DbusValue[] }
  | { kind: 'array'; items: DbusValue[] };

export type Parsed<T> = { ok: true; value: T } | { ok: false; error: string };

const NUMBER_TYPES = new Set(['byte', 'int16', 'uint16', 'int32', 'uint32', 'int64', 'uint64', 'double']);
const OPEN: Record<string, { kind: 'struct' | 'array'; close: string }> = {
  'struct {': { kind: 'struct', close: '}' },
  'array [': { kind: 'array', close: ']' },
  'dict entry(': { kind: 'struct', close: ')' },
};

/** The arguments of a method return printed by `dbus-send --print-reply`. */
export function parseDbusReply(text: string): Parsed<DbusValue[]> {
  const lines = text.split('\n');
  const header = lines.findIndex((l) => l.trim() !== '');
  if (header < 0 || !lines[header]?.startsWith('method return '))
    return { ok: false, error: `not a method return: ${JSON.stringify(text.slice(0, 120))}` };
  const stack: { items: DbusValue[]; close?: string; kind?: 'struct' | 'array' }[] = [{ items: [] }];
  for (let i = header + 1; i < lines.length; i++) {
    const line = (lines[i] ?? '').trim();
    if (line === '') continue;
    const top = stack[stack.length - 1] as (typeof stack)[number];
    const open = OPEN[line];
    if (open) {
      stack.push({ items: [], close: open.close, kind: open.kind });
      continue;
    }
    if (top.close !== undefined && line === top.close) {
      stack.pop();
      const parent = stack[stack.length - 1] as (typeof stack)[number];
      parent.items.push({ kind: top.kind ?? 'struct', items: top.items });
      continue;
    }
    const value = basicValue(line.startsWith('variant ') ? line.slice('variant '.length).trim() : line);
    if (value === undefined) return { ok: false, error: `line ${i + 1} of the reply is unreadable: ${line}` };
    top.items.push(value);
  }
  if (stack.length !== 1) return { ok: false, error: 'the reply ends inside a struct or array' };
  return { ok: true, value: (stack[0] as (typeof stack)[number]).items };
}

function basicValue(line: string): DbusValue | undefined {
  const space = line.indexOf(' ');
  if (space < 0) return undefined;
  const type = line.slice(0, space);
  const rest = line.slice(space + 1);
  if (type === 'boolean') {
    if (rest !== 'true' && rest !== 'false') return undefined;
    return { kind: 'boolean', value: rest === 'true' };
  }
  if (type === 'string' || type === 'object' || type === 'signature') {
    // `object path "…"`, `signature "…"`, `string "…"`: the text between the outer quotes.
    const start = rest.indexOf('"');
    const end = rest.lastIndexOf('"');
    if (start < 0 || end <= start) return undefined;
    return { kind: 'string', value: rest.slice(start + 1, end) };
  }
  if (NUMBER_TYPES.has(type)) {
    const value = Number(rest);
    return Number.isFinite(value) ? { kind: 'number', value } : undefined;
  }
  return undefined;
}
