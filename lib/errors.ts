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
  readonly operation: string;
  constructor(operation: string, status: number | undefined, options?: { cause?: unknown }) {
    super(
      status === undefined ? 'E_KUBE_UNREACHABLE' : `E_KUBE_${status}`,
      `${operation} failed: ${status === undefined ? describeCause(options?.cause) : `HTTP ${status} ${apiMessageOf(options?.cause)}`}`,
      options,
    );
    this.status = status;
    this.operation = operation;
  }
}

/**
 * What a failure is, without the parts that change from one attempt to the next (a
 * generated pod name in the API server's message): the operation and the HTTP status of
 * a KubeApiError, else the message. Used to say a persisting failure once.
 */
export function failureGist(err: unknown): string {
  if (err instanceof KubeApiError)
    return `${err.operation} failed: ${err.status === undefined ? 'API server unreachable' : `HTTP ${err.status}`}`;
  return err instanceof Error ? err.message : String(err);
}

function describeCause(cause: unknown): string {
  if (cause instanceof Error) {
    const inner = (cause as { cause?: unknown }).cause;
    return inner instanceof Error ? `${cause.message} (${inner.message})` : cause.message;
  }
  return String(cause);
}

/** The API server's own message of a failed call (its Status body; client-node's ApiException), '' when none. */
export function apiMessageOf(cause: unknown): string {
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
