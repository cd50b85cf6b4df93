\set c random(1, 200000)
\set m random(1, 1500)
SELECT c.buyer_id, c.shop_id, c.kind, c.closed_by_block,
    EXISTS (SELECT 1 FROM blocked_accounts b WHERE b.person_id = c.buyer_id) AS buyer_blocked,
    EXISTS (SELECT 1 FROM shop_members m WHERE m.shop_id = c.shop_id AND m.person_id = 'm' || :m) AS works_at_shop
FROM conversations c WHERE c.conversation_id = 'c' || :c;
