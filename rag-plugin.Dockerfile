# The RAG plugin (`traitgate rag-plugin`), the first step of the spec's setup sequence ("build
# the plugin container"): docs/containers.md, docs/rag.md.
# Not built by CI (no Docker engine there): test/e2e/containers.test.ts checks that every
# command below is one the repository has and that the tests run (npm ci, npm run build,
# node dist/src/cli.js rag-plugin, scripts/healthcheck.mjs).

# Build: every dependency, then the same `npm run build` as everywhere.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build

# Runtime: production dependencies only, the compiled output, the plugin's SQL migrations and
# the probe. No secret is baked in: CORE_SECRET (printed when the plugin is registered in the
# core) and DB_CONNECTION come from the environment at run time.
FROM node:20-bookworm-slim AS runtime
ENV HOST=0.0.0.0 \
    PORT=8080 \
    DATA_DIR=/home/node/data
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY --from=build /app/dist ./dist
COPY src/rag/migrations ./src/rag/migrations
COPY scripts/healthcheck.mjs ./scripts/healthcheck.mjs
# The official image's unprivileged user (uid 1000); it owns /home/node, where DATA_DIR is.
USER node
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "scripts/healthcheck.mjs", "/readyz"]
CMD ["node", "dist/src/cli.js", "rag-plugin"]
