-- mempool-bench apps: sqlite3 inserting, indexing and querying a file database.
--   sqlite3 DB  (stdin: .parameter set @rows N, then .read this file)
-- The last two lines are PRAGMA integrity_check's "ok" and this script's own
-- check, "ok" when every count and sum came out as arithmetic says.
PRAGMA cache_size = -16000;
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer TEXT, item TEXT, qty INTEGER,
                    price REAL, note TEXT);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < @rows)
INSERT INTO orders(id, customer, item, qty, price, note)
  SELECT i, printf('customer-%05d', i % 5000), printf('item-%03d', (i * 7) % 997), i % 10 + 1,
         (i % 1000) / 10.0, substr(printf('%x%x', i * 2654435761, i * 40503), 1, (i % 16) + 1) || i
  FROM n;
COMMIT;
CREATE INDEX orders_customer ON orders(customer);
CREATE INDEX orders_item_qty ON orders(item, qty);
CREATE TABLE totals AS
  SELECT customer, count(*) AS n, sum(qty) AS qty, sum(qty * price) AS amount
  FROM orders GROUP BY customer;
CREATE INDEX totals_amount ON totals(amount);
UPDATE orders SET note = upper(note) || '-' || customer WHERE qty > 8;
DELETE FROM orders WHERE id % 10 = 0;
SELECT count(*), sum(qty), count(DISTINCT customer), count(DISTINCT item) FROM orders;
SELECT customer, n, qty FROM totals ORDER BY amount DESC, customer LIMIT 3;
SELECT o.item, count(*), sum(o.qty) FROM orders o JOIN totals t ON t.customer = o.customer
  WHERE t.n > 10 AND o.item LIKE 'item-1%' GROUP BY o.item ORDER BY 2 DESC, 1 LIMIT 3;
SELECT count(*) FROM orders WHERE note LIKE '%-customer-%';
PRAGMA integrity_check;
SELECT CASE WHEN (SELECT count(*) FROM orders) = @rows - @rows / 10
             AND (SELECT sum(n) FROM totals) = @rows
             AND (SELECT count(*) FROM orders WHERE qty > 8 AND note NOT LIKE '%-customer-%') = 0
            THEN 'ok' ELSE 'WRONG' END;
