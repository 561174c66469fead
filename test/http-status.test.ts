import t from 'tap'
import { isBodiless, isSuccess } from '../src/http-status.ts'

t.test('only a 2xx is a success', async (t) => {
  t.same([100, 101, 199, 200, 204, 299, 300, 304, 404, 429, 500, 529].filter(isSuccess), [200, 204, 299])
})

t.test('an answer to HEAD, a 1xx, a 204 and a 304 have no body; any other answer may', async (t) => {
  t.ok(isBodiless('HEAD', 200), 'HEAD')
  t.ok(isBodiless('GET', 103), '1xx')
  t.ok(isBodiless('POST', 204), '204')
  t.ok(isBodiless('GET', 304), '304')
  t.same(
    [200, 201, 206, 400, 500].filter((s) => isBodiless('POST', s)),
    [],
  )
})
