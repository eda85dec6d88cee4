-- Users of the identity service (decisions.md §1).
CREATE TABLE users (
  id            uuid PRIMARY KEY,
  username      text NOT NULL,
  email         text NOT NULL DEFAULT '',
  password_hash text NOT NULL,
  mfa_enabled   boolean NOT NULL DEFAULT false,
  is_active     boolean NOT NULL DEFAULT true,
  roles         text[] NOT NULL DEFAULT '{}',
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now()
);
-- Usernames are unique regardless of case.
CREATE UNIQUE INDEX users_username_lower ON users (lower(username));
