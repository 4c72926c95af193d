-- The demo application: accounts with a login, logout and "who am I" route, and row-level
-- security so that a logged-in customer reads only their own customer row, invoices and invoice
-- lines — the database decides, the page filters nothing.
-- Loaded after Chinook and the demo roles (`~anonymous`, `app_user`); every account's password
-- is `demo`. Passwords are salted SHA-256 (built in, no extension) — fine for a demo, use a
-- slow hash (pgcrypto's crypt() with bf) for real accounts.
create schema if not exists app;
grant usage on schema app to "~anonymous", app_user;

create table app.account (
  id int generated always as identity primary key,
  email text unique not null,
  salt text not null default md5(random()::text || clock_timestamp()::text),
  password_hash text not null,
  customer_id int references public.customer,
  role text not null default 'customer'
);

insert into app.account (email, customer_id, salt, password_hash)
select email, customer_id, salt, encode(sha256(convert_to(salt || 'demo', 'UTF8')), 'hex')
from (values
  ('luisg@embraer.com.br', 1),
  ('leonekohler@surfeu.de', 2),
  ('ftremblay@gmail.com', 3)
) as a(email, customer_id),
lateral (select md5(email || random()::text) as salt) s;

-- POST /login {"email", "password"} → 200 {"email", "customer_id"} and the session cookie.
create function app.login(req jsonb, out resp jsonb, out content jsonb)
language plpgsql volatile security definer set search_path = app, pg_catalog as $$
declare
  a app.account;
begin
  select * into a from app.account
  where email = req->'body'->>'email'
    and password_hash = encode(sha256(convert_to(salt || coalesce(req->'body'->>'password', ''), 'UTF8')), 'hex');
  if not found then
    raise exception 'invalid e-mail or password' using errcode = 'RS401';
  end if;
  resp := jsonb_build_object('jwt', jsonb_build_object(
    'role', a.role, 'email', a.email, 'customer_id', a.customer_id));
  content := jsonb_build_object('email', a.email, 'customer_id', a.customer_id);
end $$;
comment on function app.login(jsonb) is 'Logs in with e-mail and password.
route:: path: /login, method: POST';

-- POST /logout → clears the session.
create function app.logout(req jsonb, out resp jsonb, out content jsonb)
language sql volatile as $$
  select jsonb_build_object('jwt', null), jsonb_build_object('ok', true)
$$;
comment on function app.logout(jsonb) is 'route:: path: /logout, method: POST';

-- GET /me → the session's claims, 401 when anonymous.
create function app.me() returns jsonb
language plpgsql stable as $$
declare
  claims jsonb := nullif(current_setting('svc.jwt.claims', true), '')::jsonb;
begin
  if claims is null or claims = 'null'::jsonb then
    raise exception 'not logged in' using errcode = 'RS401';
  end if;
  return jsonb_build_object('email', claims->'email', 'customer_id', claims->'customer_id',
    'role', claims->'role');
end $$;
comment on function app.me() is 'Who is logged in. route:: path: /me';

-- GET /invoices → the session's invoices as a page rendered on the server (templates/invoices.eta,
-- found through http.templates.path). The function selects every invoice: row-level security
-- (below) returns the logged-in customer's only. Anonymous requests get the page without a query:
-- their role may not read invoices at all.
create function app.invoices_page(req jsonb, out resp jsonb, out content jsonb)
language plpgsql stable as $$
begin
  resp := jsonb_build_object('template', 'invoices');
  if req->'jwt' is null or req->'jwt' = 'null'::jsonb then
    content := jsonb_build_object('email', null);
    return;
  end if;
  select jsonb_build_object(
    'email', coalesce(req->'jwt'->>'email', req->'jwt'->>'sub', req->'jwt'->>'role'),
    'role', req->'jwt'->>'role',
    'customer_id', req->'jwt'->'customer_id',
    'invoices', coalesce(jsonb_agg(jsonb_build_object(
      'invoice_id', i.invoice_id, 'date', to_char(i.invoice_date, 'YYYY-MM-DD'),
      'city', i.billing_city, 'country', i.billing_country, 'total', i.total)
      order by i.invoice_date desc, i.invoice_id desc), '[]'::jsonb),
    'sum', coalesce(sum(i.total), 0))
  into content
  from public.invoice i;
end $$;
comment on function app.invoices_page(jsonb) is 'The session''s invoices as a page.
route:: path: /invoices, method: GET';

revoke execute on function app.login(jsonb), app.logout(jsonb), app.me(),
  app.invoices_page(jsonb) from public;
grant execute on function app.login(jsonb), app.logout(jsonb), app.me(), app.invoices_page(jsonb)
  to "~anonymous", app_user;
-- (and to `customer`, created below with the row-level security)

-- Row-level security: the role `customer` (what a demo login mints) reads the catalogue, and of the
-- customer tables only what its session's `customer_id` claim owns.
do $$ begin
  if not exists (select from pg_roles where rolname = 'customer') then
    create role customer nologin;
  end if;
end $$;
grant customer to current_user;
grant usage on schema app to customer;
grant execute on function app.login(jsonb), app.logout(jsonb), app.me(), app.invoices_page(jsonb)
  to customer;
grant usage on schema public to customer;
grant select on artist, album, track, genre, media_type, playlist, playlist_track to customer;
grant select on customer, invoice, invoice_line to customer;
-- Anonymous requests read the catalogue, never customers' data.
revoke select on customer, invoice, invoice_line, employee from "~anonymous";

-- The session's customer: svc sets the verified JWT claims as `svc.jwt.claims` in every request.
create function app.customer_id() returns int
language sql stable as $$
  select (nullif(current_setting('svc.jwt.claims', true), '')::jsonb ->> 'customer_id')::int
$$;
revoke execute on function app.customer_id() from public;
grant execute on function app.customer_id() to customer;

alter table customer enable row level security;
alter table invoice enable row level security;
alter table invoice_line enable row level security;
create policy own_row on customer for select to customer using (customer_id = app.customer_id());
create policy own_invoices on invoice for select to customer using (customer_id = app.customer_id());
-- A line is visible when its invoice is (the subquery runs under invoice's policy).
create policy own_lines on invoice_line for select to customer
  using (exists (select from invoice i where i.invoice_id = invoice_line.invoice_id));
-- app_user is the demo's staff role (it writes the catalogue and invoices): it sees every row.
create policy staff on customer for all to app_user using (true) with check (true);
create policy staff on invoice for all to app_user using (true) with check (true);
create policy staff on invoice_line for all to app_user using (true) with check (true);
