\set c random(1, 200000)
\set m random(1, 1500)
SELECT c.buyer_id, c.shop_id, c.kind,
    c.closed_by_block OR (c.kind = 'watch' AND (EXISTS (SELECT 1 FROM account_blocks WHERE blocker_id = c.buyer_id AND blocked_type = 'shops' AND blocked_id = c.shop_id)
        OR EXISTS (SELECT 1 FROM account_blocks a JOIN shop_members m ON m.person_id = a.blocked_id
            WHERE a.blocker_id = c.buyer_id AND a.blocked_type = 'people' AND m.shop_id = c.shop_id)
        OR EXISTS (SELECT 1 FROM account_blocks a JOIN shop_members m ON m.person_id = a.blocker_id
            WHERE a.blocked_type = 'people' AND a.blocked_id = c.buyer_id AND m.shop_id = c.shop_id))) AS closed_by_block,
    EXISTS (SELECT 1 FROM blocked_accounts b WHERE b.person_id = c.buyer_id) AS buyer_blocked,
    EXISTS (SELECT 1 FROM shop_members m WHERE m.shop_id = c.shop_id AND m.person_id = 'm' || :m) AS works_at_shop
FROM conversations c WHERE c.conversation_id = 'c' || :c;
