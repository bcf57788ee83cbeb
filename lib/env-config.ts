/**
 * Reading configuration from env vars. Every problem is collected (not just the
 * first), each naming the variable, the value given and the rule broken, so a user
 * fixes a manifest in one round. `done()` throws one ConfigError listing them all;
 * mains turn that into exit code 2.
 *
 * Durations accept `500ms`, `2s`, `1.5s`, `1m`, or a bare number of seconds.
 */
import { ConfigError } from './errors.ts';

export type Env = Readonly<Record<string, string | undefined>>;

const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m)?$/;

export class EnvReader {
  private readonly problems: string[] = [];
  constructor(private readonly env: Env) {}

  private raw(name: string): string | undefined {
    const value = this.env[name];
    return value === undefined || value.trim() === '' ? undefined : value.trim();
  }

  private fail(name: string, value: string | undefined, rule: string): void {
    this.problems.push(
      value === undefined ? `${name} is not set: ${rule}` : `${name}=${JSON.stringify(value)}: ${rule}`,
    );
  }

  /** A required string; `fallback` is used when unset (and the variable is then optional). */
  string(name: string, opts: { fallback?: string; pattern?: RegExp; rule?: string } = {}): string {
    const value = this.raw(name) ?? opts.fallback;
    if (value === undefined) {
      this.fail(name, undefined, opts.rule ?? 'it is required');
      return '';
    }
    if (opts.pattern && !opts.pattern.test(value))
      this.fail(name, value, opts.rule ?? `must match ${opts.pattern}`);
    return value;
  }

  optionalString(name: string): string | undefined {
    return this.raw(name);
  }

  /** A Kubernetes object name (DNS-1123 subdomain, at most 253 characters). */
  objectName(name: string, fallback?: string): string {
    const value = this.string(name, {
      ...(fallback === undefined ? {} : { fallback }),
      rule: 'must be a Kubernetes object name (lowercase letters, digits, "-" and ".", at most 253 characters)',
    });
    if (value !== '' && (value.length > 253 || !DNS1123_SUBDOMAIN.test(value))) {
      this.fail(
        name,
        value,
        'must be a Kubernetes object name (lowercase letters, digits, "-" and ".", at most 253 characters)',
      );
    }
    return value;
  }

  integer(name: string, fallback: number, min: number, max: number): number {
    const value = this.raw(name);
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!/^-?\d+$/.test(value) || n < min || n > max) {
      this.fail(name, value, `must be a whole number from ${min} to ${max}`);
      return fallback;
    }
    return n;
  }

  /** A fraction such as 0.5 (inclusive bounds). */
  number(name: string, fallback: number, min: number, max: number): number {
    const value = this.raw(name);
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isFinite(n) || n < min || n > max) {
      this.fail(name, value, `must be a number from ${min} to ${max}`);
      return fallback;
    }
    return n;
  }

  /** A duration in milliseconds. */
  duration(name: string, fallbackMs: number, minMs: number, maxMs: number): number {
    const value = this.raw(name);
    if (value === undefined) return fallbackMs;
    const ms = parseDuration(value);
    if (ms === undefined) {
      this.fail(name, value, 'must be a duration such as 500ms, 2s or 1m (a bare number means seconds)');
      return fallbackMs;
    }
    if (ms < minMs || ms > maxMs) {
      this.fail(name, value, `must be from ${formatDuration(minMs)} to ${formatDuration(maxMs)}`);
      return fallbackMs;
    }
    return ms;
  }

  boolean(name: string, fallback: boolean): boolean {
    const value = this.raw(name)?.toLowerCase();
    if (value === undefined) return fallback;
    if (['true', '1', 'yes', 'on'].includes(value)) return true;
    if (['false', '0', 'no', 'off'].includes(value)) return false;
    this.fail(name, value, 'must be true or false');
    return fallback;
  }

  oneOf<T extends string>(name: string, allowed: readonly T[], fallback: T): T {
    const value = this.raw(name);
    if (value === undefined) return fallback;
    if (!(allowed as readonly string[]).includes(value)) {
      this.fail(name, value, `must be one of ${allowed.join(', ')}`);
      return fallback;
    }
    return value as T;
  }

  port(name: string, fallback: number): number {
    return this.integer(name, fallback, 0, 65535);
  }

  /** A cross-field rule: `message` names the variables, their values and the rule. */
  require(condition: boolean, message: string): void {
    if (!condition) this.problems.push(message);
  }

  /** Problems found so far: compare before and after reading fields to know they parsed. */
  get problemCount(): number {
    return this.problems.length;
  }

  /** True when no problem was found so far (cross-field rules need sound fields). */
  get ok(): boolean {
    return this.problems.length === 0;
  }

  /** Throws one ConfigError listing every problem found. */
  done(): void {
    if (this.problems.length > 0) throw new ConfigError(this.problems);
  }
}

/** Whether `value` is a valid Kubernetes object name (DNS-1123 subdomain, at most 253 characters). */
export function isObjectName(value: unknown): value is string {
  return typeof value === 'string' && value.length <= 253 && DNS1123_SUBDOMAIN.test(value);
}

export function parseDuration(text: string): number | undefined {
  const match = DURATION.exec(text.trim());
  if (!match) return undefined;
  const n = Number(match[1]);
  const unit = match[2] ?? 's';
  return unit === 'ms' ? n : unit === 's' ? n * 1000 : n * 60_000;
}

export function formatDuration(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`;
}
