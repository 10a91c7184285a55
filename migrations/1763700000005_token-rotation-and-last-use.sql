-- Up Migration

-- Rotation: a name may have two tokens during a grace, the successor and the one it replaced, so
-- a token gets an id of its own and the name stays unique among the tokens not replaced (which
-- also keeps a revoked name from being used again). Old instances still running the code before
-- this change read only name, token_sha256 and revoked_at: unaffected.
ALTER TABLE api_tokens ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_pkey;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (id);
ALTER TABLE api_tokens ADD COLUMN replaces bigint UNIQUE REFERENCES api_tokens (id);
ALTER TABLE api_tokens ADD COLUMN replaced_at timestamptz;
ALTER TABLE api_tokens ADD COLUMN last_used_at timestamptz;
CREATE UNIQUE INDEX api_tokens_one_current_per_name ON api_tokens (name)
  WHERE replaced_at IS NULL;

COMMENT ON TABLE api_tokens IS
  'Bearer tokens of the plant store API. Managed with `npm run token -- create|rotate|list|revoke`; a name is never used again once revoked, and has two tokens during a rotation''s grace.';
COMMENT ON COLUMN api_tokens.id IS 'Identity of the token (a name keeps its tokens across rotations).';
COMMENT ON COLUMN api_tokens.name IS
  'Name of the token, as shown in logs and in plants.created_by; unique among the tokens not replaced.';
COMMENT ON COLUMN api_tokens.revoked_at IS
  'When the token stops or stopped working: the revocation, or the end of the grace of a rotated token (in the future during it); NULL while it is valid. Refused with 40102 from then on, within 1 second on every instance.';
COMMENT ON COLUMN api_tokens.replaces IS
  'The token this one replaced by `npm run token -- rotate` (its id); NULL for a token made by create.';
COMMENT ON COLUMN api_tokens.replaced_at IS
  'When `npm run token -- rotate` replaced this token by a successor; NULL for the current token of its name.';
COMMENT ON COLUMN api_tokens.last_used_at IS
  'When a request last authenticated with the token, at most 10 minutes stale; written at most once per token per 10 minutes, off the request path. NULL: not used since it was made (or since tokens recorded their use).';

-- Recording a use changes no token: only changes to what the instances load notify them.
DROP TRIGGER api_tokens_changed ON api_tokens;
CREATE TRIGGER api_tokens_changed
  AFTER INSERT OR DELETE OR TRUNCATE
    OR UPDATE OF name, token_sha256, revoked_at, expires_at, replaced_at
  ON api_tokens
  FOR EACH STATEMENT EXECUTE FUNCTION api_tokens_notify();

-- Down Migration

-- Back to one token per name: a rotated token's predecessor (in its grace or ended) goes.
DROP TRIGGER api_tokens_changed ON api_tokens;
CREATE TRIGGER api_tokens_changed
  AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON api_tokens
  FOR EACH STATEMENT EXECUTE FUNCTION api_tokens_notify();
UPDATE api_tokens SET replaces = NULL;
DELETE FROM api_tokens WHERE replaced_at IS NOT NULL;
DROP INDEX api_tokens_one_current_per_name;
ALTER TABLE api_tokens DROP COLUMN last_used_at;
ALTER TABLE api_tokens DROP COLUMN replaced_at;
ALTER TABLE api_tokens DROP COLUMN replaces;
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_pkey;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (name);
ALTER TABLE api_tokens DROP COLUMN id;
