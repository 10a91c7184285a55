-- Up Migration

-- char_length must count code points, which needs a UTF8 database.
DO $$
BEGIN
  IF current_setting('server_encoding') <> 'UTF8' THEN
    RAISE EXCEPTION 'the plant store needs a UTF8 database; this one is %',
      current_setting('server_encoding');
  END IF;
END
$$;

CREATE TABLE api_tokens (
  name text PRIMARY KEY
    CONSTRAINT api_tokens_name_format CHECK (name ~ '^[A-Za-z0-9._-]{1,64}$'),
  token_sha256 bytea NOT NULL UNIQUE
    CONSTRAINT api_tokens_digest_length CHECK (octet_length(token_sha256) = 32),
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);

COMMENT ON TABLE api_tokens IS
  'Bearer tokens of the plant store API. Managed with `npm run token -- create|list|revoke`; names are never reused.';
COMMENT ON COLUMN api_tokens.name IS
  'Name of the token, as shown in logs and in plants.created_by.';
COMMENT ON COLUMN api_tokens.token_sha256 IS
  'SHA-256 digest of the token. The token itself is shown once, at creation, and never stored.';
COMMENT ON COLUMN api_tokens.created_at IS 'When the token was created.';
COMMENT ON COLUMN api_tokens.revoked_at IS
  'When the token was revoked; NULL while it is valid. Revoked tokens stop working within 1 second.';

-- Every change reaches each running instance at once (LISTEN api_tokens_changed).
CREATE FUNCTION api_tokens_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('api_tokens_changed', '');
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION api_tokens_notify() IS
  'Notifies the running plant store instances that api_tokens changed, so they reload it.';

CREATE TRIGGER api_tokens_changed
  AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON api_tokens
  FOR EACH STATEMENT EXECUTE FUNCTION api_tokens_notify();

-- Down Migration

DROP TABLE api_tokens;
DROP FUNCTION api_tokens_notify();
