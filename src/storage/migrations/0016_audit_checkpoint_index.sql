-- The newest signed checkpoint, found without scanning the log (docs/audit.md, "Chain state"):
-- the console asks for it on every load of its Overview and Audit pages, and a log with few or
-- no checkpoints would otherwise be read backwards to its first event. Only checkpoint events
-- are indexed, so writing any other event costs nothing more.
CREATE INDEX audit_events_checkpoint_seq ON audit_events (seq) WHERE action = 'audit_checkpoint';
