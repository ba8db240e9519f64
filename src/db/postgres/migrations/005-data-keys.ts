/** The wrapped data keys of encrypted object copies, as SQLite's 009-data-keys adds them. */
export const sql = `
CREATE TABLE data_keys (
  data_key_id TEXT NOT NULL PRIMARY KEY,  -- 32 hex digits, written in the object copy's header
  kek_id      TEXT NOT NULL,              -- the key-encryption key that wrapped it (an id, never a key)
  wrapped     TEXT NOT NULL               -- base64 of nonce, wrapped key and tag
);

CREATE INDEX data_keys_by_kek ON data_keys(kek_id, data_key_id);
`;
