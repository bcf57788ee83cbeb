/**
 * The command line of `kubectl leasehold` (pure): argv in, the command and its flags
 * out, or one message naming the bad input and the rule.
 *
 * kubectl passes a plugin the words after its name and nothing else (no --kubeconfig,
 * --context or -n of its own: `kubectl -n x leasehold ...` is refused by kubectl), so
 * the plugin reads KUBECONFIG and takes those flags itself, spelt as kubectl spells them
 * (`--flag value` or `--flag=value`; `-n value`, `-nvalue`), anywhere on the line.
 */

export const COMMANDS = ['status', 'timeline', 'why'] as const;
export type Command = (typeof COMMANDS)[number];

export interface PluginArgs {
  command: Command | 'help';
  /** timeline and why: a ShareManager's name, or the name of the claim it serves. */
  share?: string;
  /** -n: only this namespace; unset: every namespace. */
  namespace?: string;
  kubeconfig?: string;
  context?: string;
}

export type ParsedArgs = { ok: true; args: PluginArgs } | { ok: false; message: string };

export const USAGE = `Usage: kubectl leasehold COMMAND [flags]

Commands:
  status          every share: holder pod and node (from its Lease), phase, whether it is
                  served, conditions, last failover and how long it took
  timeline SHARE  the steps of SHARE's last failover with their times, and its events
  why SHARE       why SHARE is not served (the condition, events and agent log lines that
                  explain it), or that it is served

SHARE is a ShareManager's name, or the name of the claim it serves (a claim of a
leasehold StorageClass, or spec.consumer's claim).

Flags:
  -n, --namespace NS    only namespace NS (default: every namespace)
  -A, --all-namespaces  every namespace (the default)
      --kubeconfig FILE the kubeconfig to use (default: $KUBECONFIG, else ~/.kube/config)
      --context NAME    the kubeconfig context to use (default: its current context)
  -h, --help            this text

Needs read access only: docs/operations.md, "kubectl leasehold", lists the RBAC.`;

const VALUE_FLAGS: Record<string, 'namespace' | 'kubeconfig' | 'context'> = {
  '-n': 'namespace',
  '--namespace': 'namespace',
  '--kubeconfig': 'kubeconfig',
  '--context': 'context',
};

export function parseArgs(argv: readonly string[]): ParsedArgs {
  const flags: Pick<PluginArgs, 'namespace' | 'kubeconfig' | 'context'> = {};
  const words: string[] = [];
  let allNamespaces = false;
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (arg === '-h' || arg === '--help') {
      help = true;
      continue;
    }
    if (arg === '-A' || arg === '--all-namespaces') {
      allNamespaces = true;
      continue;
    }
    if (!arg.startsWith('-') || arg === '-') {
      words.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const [flag, inline] =
      arg.startsWith('--') && eq > 0
        ? [arg.slice(0, eq), arg.slice(eq + 1)]
        : arg.startsWith('-n') && arg.length > 2 && !arg.startsWith('--')
          ? ['-n', arg.slice(2)]
          : [arg, undefined];
    const field = VALUE_FLAGS[flag];
    if (!field)
      return {
        ok: false,
        message: `unknown flag ${JSON.stringify(arg)}: the flags are -n/--namespace, -A/--all-namespaces, --kubeconfig, --context and -h/--help`,
      };
    const value = inline ?? argv[++i];
    if (value === undefined || value === '' || (inline === undefined && value.startsWith('-')))
      return { ok: false, message: `flag ${flag} needs a value` };
    flags[field] = value;
  }
  if (help) return { ok: true, args: { command: 'help', ...flags } };
  if (allNamespaces && flags.namespace !== undefined)
    return { ok: false, message: `-A and -n ${flags.namespace} contradict each other: give one` };
  const [command, share, ...rest] = words;
  if (command === undefined)
    return { ok: false, message: `no command: expected one of ${COMMANDS.join(', ')}` };
  if (!(COMMANDS as readonly string[]).includes(command))
    return {
      ok: false,
      message: `unknown command ${JSON.stringify(command)}: expected one of ${COMMANDS.join(', ')}`,
    };
  const known = command as Command;
  if (known === 'status') {
    if (share !== undefined)
      return {
        ok: false,
        message: `status takes no SHARE (got ${JSON.stringify(share)}): it lists every share; use why ${share}`,
      };
    return { ok: true, args: { command: known, ...flags } };
  }
  if (share === undefined)
    return {
      ok: false,
      message: `${known} needs a SHARE: the name of a ShareManager or of the claim it serves`,
    };
  if (rest.length > 0)
    return {
      ok: false,
      message: `${known} takes one SHARE; unexpected ${rest.map((r) => JSON.stringify(r)).join(' ')}`,
    };
  return { ok: true, args: { command: known, share, ...flags } };
}
