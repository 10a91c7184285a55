-- Up Migration

-- A lifetime for every new token. Adding a column without a default changes only the catalogue:
-- instances still running the code before it go on reading name and digest, unaffected.
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;

COMMENT ON COLUMN api_tokens.expires_at IS
  'When the token stops working (refused with 40103 within 1 second on every instance, no notification needed); NULL: never (tokens made before tokens had a lifetime, or made with --expires-in never).';

-- Down Migration

ALTER TABLE api_tokens DROP COLUMN expires_at;
