/**
 * Errors are values with context: each class has a stable `code`, names the object
 * it concerns (`ns/name`, a node, an env var) and chains the underlying error as
 * `cause`. They are logged once, where handled.
 */
export class LeaseholdError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** Bad configuration (env vars): the process exits with code 2. */
export class ConfigError extends LeaseholdError {
  readonly problems: readonly string[];
  constructor(problems: readonly string[]) {
    super('E_CONFIG', `invalid configuration:\n  - ${problems.join('\n  - ')}`);
    this.problems = problems;
  }
}

/** A Kubernetes API request failed; `status` is the HTTP status when one came back. */
export class KubeApiError extends LeaseholdError {
  readonly status: number | undefined;
  constructor(operation: string, status: number | undefined, options?: { cause?: unknown }) {
    super(
      status === undefined ? 'E_KUBE_UNREACHABLE' : `E_KUBE_${status}`,
      `${operation} failed: ${status === undefined ? describeCause(options?.cause) : `HTTP ${status} ${reasonOf(options?.cause)}`}`,
      options,
    );
    this.status = status;
  }
}

function describeCause(cause: unknown): string {
  if (cause instanceof Error) {
    const inner = (cause as { cause?: unknown }).cause;
    return inner instanceof Error ? `${cause.message} (${inner.message})` : cause.message;
  }
  return String(cause);
}

function reasonOf(cause: unknown): string {
  const body = (cause as { body?: unknown })?.body;
  if (typeof body === 'string') {
    try {
      const parsed = JSON.parse(body) as { message?: string };
      if (parsed.message) return parsed.message;
    } catch {
      return body.slice(0, 200);
    }
  }
  if (body && typeof body === 'object' && 'message' in body)
    return String((body as { message: unknown }).message);
  return '';
}
