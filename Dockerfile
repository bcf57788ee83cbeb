# One image, both entrypoints: `args: [agent]` or `args: [manager]`.
# NB: no Docker engine runs on the development machines, so CI cannot build this
# image; it is kept deliberately simple. Build: docker build -t leasehold.dev/leasehold:dev .
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY lib lib
COPY agent agent
COPY manager manager
# The manager checks the default NFS server's export path with its own settings reader.
COPY server server
COPY dev dev
COPY bin bin
RUN npx tsc -p tsconfig.build.json && npm prune --omit=dev

FROM gcr.io/distroless/nodejs24-debian12:nonroot
WORKDIR /app
COPY --from=build /src/node_modules node_modules
COPY --from=build /src/package.json package.json
COPY --from=build /src/dist dist
USER 65532:65532
ENTRYPOINT ["/nodejs/bin/node", "dist/bin/leasehold.js"]
