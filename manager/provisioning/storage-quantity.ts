/**
 * A storage quantity ("10Gi", "1.5Gi", "500M", "1e9") in bytes, as Kubernetes'
 * resource.Quantity reads it; undefined for anything else. Hand-written because
 * client-node's quantityToScalar throws on a decimal with a suffix ("1.5Gi", which the
 * API accepts) and returns a mix of number and bigint. Numbers are exact to 2^53 bytes
 * (8 PiB), beyond any one volume.
 */
const SUFFIX: Record<string, number> = {
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};
const QUANTITY = /^\+?(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E))?$/;

export function storageBytes(text: string): number | undefined {
  const m = QUANTITY.exec(text.trim());
  if (!m) return undefined;
  const value = Number(`${m[1]}${m[2] ?? ''}`) * (SUFFIX[m[3] ?? ''] ?? 1);
  // Kubernetes rounds a fractional byte count up.
  return Number.isFinite(value) ? Math.ceil(value) : undefined;
}
