// What the tests share: the agents they run against, and waiting with
// deadlines.

import http from 'node:http';

/** The agents' API URLs (LOCKMESH_TEST_URLS). */
export const URLS = (process.env.LOCKMESH_TEST_URLS ?? '').split(',').filter(Boolean);

/** How long an event may take to come, at most, before a test fails (ms). */
export const DEADLINE = 20_000;

const NO_SKIP = process.env.LOCKMESH_TEST_NO_SKIP === '1';

/** Skips the test without value (fails under LOCKMESH_TEST_NO_SKIP=1); false when skipped. */
export function need(t, value, what) {
  if (value) return true;
  if (NO_SKIP) throw new Error(`${what} is not set (LOCKMESH_TEST_NO_SKIP=1)`);
  t.skip(`${what} is not set`);
  return false;
}

/** Resolves as promise does, or rejects once ms have passed. */
export function within(promise, what, ms = DEADLINE) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** Waits until await cond() holds, checking every 20 ms, at most ms. */
export async function waitUntil(cond, what, ms = DEADLINE) {
  const end = performance.now() + ms;
  while (!(await cond())) {
    if (performance.now() > end) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A request of another program, with node:http alone. */
export function behindItsBack(method, url, path) {
  return new Promise((resolve, reject) => {
    const headers = {};
    if (process.env.LOCKMESH_API_TOKEN) headers.Authorization = 'Bearer ' + process.env.LOCKMESH_API_TOKEN;
    const req = http.request(url + path, { method, headers }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode < 300 ? resolve() : reject(new Error(`${method} ${path}: ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end();
  });
}
