-- A sealed field's associated data binds its event's stream besides the event's own `$seal` id
-- (docs/event-log.md, "Personal data"), so a sealed value copied into another stream does not
-- open without an index that keeps `$seal` unique: keeping that index cost an append about as much
-- as the rest of a sealed event's server work (3 to 5 µs an event, measured with append_events
-- batches of 100 messages, with the index and without, one after the other on one server).
DROP INDEX events_seal;
