# The Traitgate core (`traitgate serve`): docs/containers.md.
# Not built by CI (no Docker engine there): test/e2e/containers.test.ts checks that every
# command below is one the repository has and that the tests run (npm ci, npm run build,
# node dist/src/cli.js serve, scripts/healthcheck.mjs).

# Build: every dependency, then the same `npm run build` as everywhere (tsc to dist/, the
# admin console bundled into dist/console).
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build

# Runtime: production dependencies only, the compiled output, the SQL migrations it applies at
# start, the sample corpus (for `traitgate ingest`), the probe and the setup script. No secret is baked in:
# JWT_SECRET, DATA_ENCRYPTION_KEY and DB_CONNECTION come from the environment at run time.
FROM node:20-bookworm-slim AS runtime
ENV HOST=0.0.0.0 \
    PORT=8080 \
    DATA_DIR=/home/node/data
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY --from=build /app/dist ./dist
COPY src/storage/migrations ./src/storage/migrations
COPY src/rag/migrations ./src/rag/migrations
COPY examples/corpus ./examples/corpus
COPY scripts/healthcheck.mjs scripts/setup-rag.mjs ./scripts/
# The official image's unprivileged user (uid 1000); it owns /home/node, where DATA_DIR is.
USER node
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "scripts/healthcheck.mjs", "/readyz"]
CMD ["node", "dist/src/cli.js", "serve"]
