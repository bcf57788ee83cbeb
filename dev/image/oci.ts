/**
 * The JSON documents of an OCI image layout (image-spec v1.1): image config, manifest,
 * index. Pure: build.ts writes them, with the layer tarballs, into blobs/sha256/ and
 * tars the layout up for `ctr images import` (as dev/node/build.sh does for pause).
 * Layers are zstd-compressed tar (`application/vnd.oci.image.layer.v1.tar+zstd`, which
 * containerd 2 unpacks): a layer's digest is that of the compressed blob, its diff_id
 * (in the config) that of the tar. The image name is in the index as both
 * `io.containerd.image.name` (what containerd names the image on import) and
 * `org.opencontainers.image.ref.name`.
 */
import type { ImageConfig } from './recipes.ts';

export interface Descriptor {
  digest: string;
  size: number;
}

/** A layer: the compressed blob's descriptor and the uncompressed tar's digest. */
export interface LayerDescriptor extends Descriptor {
  diffId: string;
}

export const LAYER_MEDIA_TYPE = 'application/vnd.oci.image.layer.v1.tar+zstd';

export function imageConfigJson(config: ImageConfig, layers: readonly LayerDescriptor[]): string {
  const c: Record<string, unknown> = {
    User: config.User,
    Env: config.Env,
    Entrypoint: config.Entrypoint,
    WorkingDir: config.WorkingDir,
  };
  if (config.Cmd) c.Cmd = config.Cmd;
  if (Object.keys(config.ExposedPorts).length > 0) c.ExposedPorts = config.ExposedPorts;
  if (config.StopSignal) c.StopSignal = config.StopSignal;
  return JSON.stringify({
    architecture: 'amd64',
    os: 'linux',
    config: c,
    rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
  });
}

export function manifestJson(config: Descriptor, layers: readonly LayerDescriptor[]): string {
  return JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
    layers: layers.map((l) => ({ mediaType: LAYER_MEDIA_TYPE, digest: l.digest, size: l.size })),
  });
}

export function indexJson(manifest: Descriptor, ref: string): string {
  return JSON.stringify({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.index.v1+json',
    manifests: [
      {
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        ...manifest,
        platform: { architecture: 'amd64', os: 'linux' },
        annotations: { 'io.containerd.image.name': ref, 'org.opencontainers.image.ref.name': ref },
      },
    ],
  });
}

export const OCI_LAYOUT = JSON.stringify({ imageLayoutVersion: '1.0.0' });
