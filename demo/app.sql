-- The demo application: accounts with a login, logout and "who am I" route.
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
  role text not null default 'app_user'
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

revoke execute on function app.login(jsonb), app.logout(jsonb), app.me() from public;
grant execute on function app.login(jsonb), app.logout(jsonb), app.me() to "~anonymous", app_user;
