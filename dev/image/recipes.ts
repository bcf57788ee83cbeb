/**
 * What the local image build (build.ts) makes: one recipe per published Dockerfile,
 * written as data so that test/unit/image-dockerfile-step.test.ts can hold each recipe
 * against its Dockerfile (dockerfile.ts) and fail when the two part ways.
 *
 * Each image is layers (zstd tar) in the order the Dockerfile's final stage makes them:
 *   base          the Dockerfile's FROM, rebuilt from Debian 12 packages with mmdebstrap
 *                 (for nfs-ganesha with the final stage's apt-get packages in it);
 *   node          the Node 24 binary where that base image has it;
 *   node_modules  /app/node_modules: `npm ci --omit=dev` (what `npm ci && npm prune
 *                 --omit=dev` leaves); the same layer in both images;
 *   package.json  /app/package.json;
 *   dist          /app/dist: tsc of the build stage's sources.
 * Guarantees (checked by the unit test): the image config (user, entrypoint, cmd,
 * workdir, env, exposed ports, stop signal) is the one `docker build` would give from
 * `baseConfig` plus the final stage's instructions; the build stage's sources, the
 * final stage's COPYs and its apt-get packages are the recipe's.
 * NB, not the same as the published base images (so not checked): distroless ships its
 * Debian packages extracted without their maintainer scripts, as the `extract` variant
 * here does, but also a few files of its own (/etc/os-release of distroless); the
 * `node:24-bookworm-slim` image also has npm, corepack, yarn and docker-entrypoint.sh,
 * which the entrypoint never uses, so the local base has Node alone (and no
 * YARN_VERSION in its env).
 */

/** The subset of an OCI image config (`config` member) that an image's behaviour rests on. */
export interface ImageConfig {
  User: string;
  Env: string[];
  Entrypoint: string[] | null;
  Cmd: string[] | null;
  WorkingDir: string;
  ExposedPorts: Record<string, Record<string, never>>;
  StopSignal: string;
}

export interface ImageRecipe {
  /** File name stem of the outputs (<name>.oci.tar) and the image name's last part. */
  name: string;
  /** The published Dockerfile, relative to the repository root. */
  dockerfile: string;
  /** The final stage's FROM in that Dockerfile; the base layer stands for it. */
  dockerfileFrom: string;
  /** The FROM image's own config, as published: what the Dockerfile's instructions start from. */
  baseConfig(nodeVersion: string): ImageConfig;
  /** The build stage's COPYs of sources (besides package files and tsconfigs): tsc compiles these. */
  buildSources: string[];
  /**
   * Commands the build stage runs in /src after tsc (its RUNs name each one): native
   * parts built into dist/, which the dist layer then carries.
   */
  nativeBuilds: string[];
  /** The final stage's `COPY --from=build <src> <dest>`, in order. */
  appCopies: { src: string; dest: string }[];
  /** Debian packages the final stage installs with apt-get (none for distroless). */
  aptPackages: string[];
  /** mmdebstrap's base: variant and packages (the FROM image's content), plus a hook. */
  base: { variant: 'extract' | 'minbase'; packages: string[]; customize: string[] };
  /** Where the Node binary goes in the image (the FROM image's place for it). */
  nodePath: string;
  /** The config the local build writes: what the Dockerfile gives (checked by the unit test). */
  config(nodeVersion: string): ImageConfig;
}

const PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
export const DEBIAN_SUITE = 'bookworm';
export const DEBIAN_MIRRORS = [
  'deb http://deb.debian.org/debian bookworm main',
  'deb http://deb.debian.org/debian bookworm-updates main',
  'deb http://deb.debian.org/debian-security bookworm-security main',
];

/** Copies of the build stage's /src into the final stage's /app (both Dockerfiles). */
const APP_COPIES = [
  { src: '/src/node_modules', dest: 'node_modules' },
  { src: '/src/package.json', dest: 'package.json' },
  { src: '/src/dist', dest: 'dist' },
];

/** gcr.io/distroless/nodejs24-debian12:nonroot, from Debian packages (distroless's cc image + Node). */
export const leaseholdImage: ImageRecipe = {
  name: 'leasehold',
  dockerfile: 'Dockerfile',
  dockerfileFrom: 'gcr.io/distroless/nodejs24-debian12:nonroot',
  baseConfig: () => ({
    User: '65532',
    Env: [PATH, 'SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt'],
    Entrypoint: ['/nodejs/bin/node'],
    Cmd: null,
    WorkingDir: '/home/nonroot',
    ExposedPorts: {},
    StopSignal: '',
  }),
  buildSources: ['lib', 'agent', 'manager', 'server', 'dev', 'bin'],
  nativeBuilds: [],
  appCopies: APP_COPIES,
  aptPackages: [],
  base: {
    variant: 'extract',
    // distroless base-debian12 (base-files, netbase, tzdata, media-types, ca-certificates,
    // libc6, libssl3) and cc-debian12 (libgcc-s1, libgomp1, libstdc++6).
    packages: [
      'base-files',
      'netbase',
      'tzdata',
      'media-types',
      'ca-certificates',
      'libc6',
      'libssl3',
      'libgcc-s1',
      'libgomp1',
      'libstdc++6',
    ],
    // What distroless writes itself: the users (root, nobody, nonroot 65532), their
    // homes, /tmp, and the CA bundle ca-certificates' postinst would generate.
    customize: [
      `printf 'root:x:0:0:root:/root:/sbin/nologin\\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\\n' > "$1/etc/passwd"`,
      `printf 'root:x:0:\\nnobody:x:65534:\\nnonroot:x:65532:\\n' > "$1/etc/group"`,
      'mkdir -p "$1/root" "$1/home/nonroot" "$1/tmp" "$1/etc/ssl/certs" && chmod 700 "$1/root" && chmod 1777 "$1/tmp" && chown 65532:65532 "$1/home/nonroot"',
      'cat "$1"/usr/share/ca-certificates/mozilla/*.crt > "$1/etc/ssl/certs/ca-certificates.crt"',
    ],
  },
  nodePath: 'nodejs/bin/node',
  config: () => ({
    User: '65532:65532',
    Env: [PATH, 'SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt'],
    Entrypoint: ['/nodejs/bin/node', 'dist/bin/leasehold.js'],
    Cmd: null,
    WorkingDir: '/app',
    ExposedPorts: {},
    StopSignal: '',
  }),
};

/**
 * The NFS image's Debian packages (the Dockerfile's apt-get): ganesha and its VFS FSAL,
 * rpcbind (NFSv3), the metrics' private bus and its client, and what the reconnector
 * runs from the same image (conntrack, iproute2's ss).
 */
const NFS_IMAGE_PACKAGES = [
  'nfs-ganesha',
  'nfs-ganesha-vfs',
  'rpcbind',
  'dbus-daemon',
  'dbus-bin',
  'conntrack',
  'iproute2',
];

/** node:24-bookworm-slim (debian:bookworm-slim + Node) with Debian's NFS-Ganesha. */
export const nfsGaneshaImage: ImageRecipe = {
  name: 'nfs-ganesha',
  dockerfile: 'server/nfs-ganesha/Dockerfile',
  dockerfileFrom: 'node:24-bookworm-slim',
  baseConfig: (nodeVersion) => ({
    User: '',
    Env: [PATH, `NODE_VERSION=${nodeVersion}`],
    Entrypoint: ['docker-entrypoint.sh'],
    Cmd: ['node'],
    WorkingDir: '',
    ExposedPorts: {},
    StopSignal: '',
  }),
  buildSources: ['lib', 'server'],
  nativeBuilds: ['bash server/nfs-ganesha/native/build.sh dist/server/nfs-ganesha'],
  appCopies: APP_COPIES,
  aptPackages: NFS_IMAGE_PACKAGES,
  base: {
    variant: 'minbase',
    packages: NFS_IMAGE_PACKAGES,
    // /etc/mtab as debootstrap makes it (so debian:bookworm-slim has it; mmdebstrap does
    // not): ganesha's VFS FSAL finds the export's file system there. And the node
    // image's user (uid/gid 1000), as its Dockerfile adds it.
    customize: [
      'ln -s /proc/mounts "$1/etc/mtab"',
      'chroot "$1" groupadd --gid 1000 node',
      'chroot "$1" useradd --uid 1000 --gid node --shell /bin/bash --create-home node',
    ],
  },
  nodePath: 'usr/local/bin/node',
  config: (nodeVersion) => ({
    User: '',
    Env: [PATH, `NODE_VERSION=${nodeVersion}`],
    Entrypoint: ['node', 'dist/server/nfs-ganesha/main.js'],
    Cmd: null,
    WorkingDir: '/app',
    ExposedPorts: { '2049/tcp': {}, '20048/tcp': {}, '9587/tcp': {} },
    StopSignal: 'SIGTERM',
  }),
};

export const IMAGE_RECIPES: readonly ImageRecipe[] = [leaseholdImage, nfsGaneshaImage];
