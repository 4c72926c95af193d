/** The cookie module: parsing keeps every value of a name; writing goes through the `cookie` library. */
import assert from "node:assert/strict";
import {
  cookieValues,
  parseCookieHeader,
  requestCookies,
  setCookie,
  setsCookie,
  withoutCookie,
} from "../../src/auth/cookies.ts";
import { cookieHeader } from "../../src/http/routes/response.ts";

Deno.test("parseCookieHeader keeps every value of a repeated name, in order", () => {
  assert.deepEqual(parseCookieHeader(null), new Map());
  assert.deepEqual(parseCookieHeader(""), new Map());
  assert.deepEqual(
    [...parseCookieHeader(' a=1; b="two" ;a = 3; =x; bare; c=x=y; a=')],
    [["a", ["1", "3", ""]], ["b", ["two"]], ["c", ["x=y"]]],
  );
});

Deno.test("cookieValues: finds every occurrence of the exact name", () => {
  assert.deepEqual(cookieValues(null, "a"), []);
  assert.deepEqual(cookieValues("", "a"), []);
  assert.deepEqual(cookieValues("xa=1; ax=2; a", "a"), []);
  assert.deepEqual(cookieValues("b=1;a=2; c=3", "a"), ["2"]);
  assert.deepEqual(cookieValues(' a = "q.r.s" ; a=t', "a"), ["q.r.s", "t"]);
  assert.deepEqual(cookieValues("a=x=y", "a"), ["x=y"]);
});

Deno.test("requestCookies: first value of each name, decoded, without the session cookie", () => {
  assert.deepEqual(
    requestCookies(
      'theme=dark; accesstoken=t; n=%C3%A9t%C3%A9; theme=light; q="a%20b"; bad=%E0',
      "accesstoken",
    ),
    { theme: "dark", n: "été", q: "a b", bad: "%E0" },
  );
  assert.deepEqual(requestCookies(null, "accesstoken"), {});
});

Deno.test("withoutCookie drops every pair of the name and keeps the rest", () => {
  assert.equal(withoutCookie("a=1; accesstoken=t;b=2; accesstoken = u", "accesstoken"), "a=1; b=2");
  assert.equal(withoutCookie("accesstoken=t", "accesstoken"), "");
  assert.equal(withoutCookie("accesstokens=1; bare", "accesstoken"), "accesstokens=1; bare");
});

Deno.test("setCookie writes the attributes in the library's order, values percent-encoded", () => {
  assert.equal(
    setCookie("sid", "a.b-c_d", {
      maxAge: 60,
      path: "/",
      domain: "example.com",
      expires: new Date(Date.UTC(2037, 9, 21, 7, 28)),
      httpOnly: true,
      secure: true,
      sameSite: "Strict",
    }),
    "sid=a.b-c_d; Max-Age=60; Domain=example.com; Path=/; Expires=Wed, 21 Oct 2037 07:28:00 GMT; HttpOnly; Secure; SameSite=Strict",
  );
  assert.equal(setCookie("a", "x y/é;"), "a=x%20y%2F%C3%A9%3B");
  assert.throws(() => setCookie("a b", "1"), TypeError);
  assert.throws(() => setCookie("a", "1", { domain: "bad domain" }), /domain/);
});

Deno.test("a route cookie's expires is sent as an HTTP date", () => {
  assert.equal(
    cookieHeader("a", { value: "1", expires: "2037-10-21T07:28:00Z", max_age: null }, 100),
    "a=1; Path=/; Expires=Wed, 21 Oct 2037 07:28:00 GMT; HttpOnly; Secure; SameSite=Lax",
  );
  assert.throws(
    () => cookieHeader("a", { value: "1", expires: "someday" }, 100),
    /expires must be/,
  );
  assert.throws(() => cookieHeader("a", { value: "1", path: "/é" }, 100), /path/);
});

Deno.test("setsCookie reads the name as a browser does", () => {
  for (
    const v of [
      "accesstoken=x",
      "accesstoken=",
      "accesstoken=; Max-Age=0",
      "accesstoken=x; Path=/a; Domain=example.com; HttpOnly",
      "  accesstoken=x",
      "accesstoken\t =x",
      '"accesstoken"=x',
      '" accesstoken "=x',
      "=accesstoken=x",
      " = accesstoken",
      "accesstoken",
      "a=1, accesstoken=x",
      "a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT, accesstoken=x",
    ]
  ) assert.ok(setsCookie(v, "accesstoken"), JSON.stringify(v));
  for (
    const v of [
      "accesstokens=x",
      "AccessToken=x",
      "x_accesstoken=x",
      "a=accesstoken",
      "a=1; Path=/accesstoken",
      "a=1; accesstoken=x",
      "a=1; Expires=Wed, 21 Oct 2037 07:28:00 GMT",
      "=a=accesstoken",
      "",
    ]
  ) assert.ok(!setsCookie(v, "accesstoken"), JSON.stringify(v));
});
