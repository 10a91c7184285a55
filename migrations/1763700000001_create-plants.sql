-- Up Migration

CREATE TABLE plants (
  id bigint PRIMARY KEY,
  name text NOT NULL
    CONSTRAINT plants_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
  tag text
    CONSTRAINT plants_tag_length CHECK (char_length(tag) BETWEEN 1 AND 100),
  created_at timestamptz NOT NULL DEFAULT now(),
  created_by text NOT NULL
);

COMMENT ON TABLE plants IS
  'Plants created through POST /plants. Rows are only ever inserted by the service.';
COMMENT ON COLUMN plants.id IS
  'Identifier chosen by the client (int64), also the idempotency key of the create.';
COMMENT ON COLUMN plants.name IS 'Name of the plant: 1 to 200 characters (code points).';
COMMENT ON COLUMN plants.tag IS
  'Tag that specifies the type of the plant: 1 to 100 characters, or NULL when none was given.';
COMMENT ON COLUMN plants.created_at IS 'When the row was inserted (start of its transaction).';
COMMENT ON COLUMN plants.created_by IS
  'Name of the API token (api_tokens.name) that created the row.';

-- Down Migration

DROP TABLE plants;
