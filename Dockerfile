# syntax=docker/dockerfile:1
# tokentap: compile with tsc, run on Node 26 (the active LTS since October 2026) slim with production dependencies only, as the
# unprivileged `node` user (uid 1000).
#
#   docker build -t tokentap .
#   docker run --rm -p 8080:8080 -p 9464:9464 \
#     -v "$PWD/my-config.yaml:/etc/tokentap/config.yaml:ro" tokentap
#
# The config is read from $TOKENTAP_CONFIG (/etc/tokentap/config.yaml; the image ships
# config/default.yaml there). TOKENTAP_HOST and TOKENTAP_ADMIN_HOST (0.0.0.0 here), TOKENTAP_PORT,
# TOKENTAP_ADMIN_PORT and TOKENTAP_LOG_LEVEL override it.
ARG NODE_IMAGE=node:26-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npx tsc -p tsconfig.build.json

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts && npm cache clean --force

FROM ${NODE_IMAGE}
# The config's listeners default to loopback; in a container they must take the network's traffic.
ENV NODE_ENV=production \
    TOKENTAP_CONFIG=/etc/tokentap/config.yaml \
    TOKENTAP_HOST=0.0.0.0 \
    TOKENTAP_ADMIN_HOST=0.0.0.0
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist/src ./dist/src
COPY package.json ./
COPY config/default.yaml ./config/default.yaml
COPY config/default.yaml /etc/tokentap/config.yaml
# The image's `node` user, by number so Kubernetes can verify runAsNonRoot.
USER 1000:1000
# 8080: the proxy; 9464: admin (/metrics, /healthz, /readyz).
EXPOSE 8080 9464
# The slim image has no curl: Node's own fetch asks the admin listener.
HEALTHCHECK --interval=15s --timeout=3s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.TOKENTAP_ADMIN_PORT || 9464) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# SIGTERM drains: /readyz turns 503, open streams get server.drain_seconds to finish.
STOPSIGNAL SIGTERM
CMD ["node", "dist/src/server.js"]
