import t from 'tap'
import { RequestIds } from '../../src/proxy/request-id.ts'

t.test('a made-up request id carries 64 random bits after the pid, so no id leads to another request’s', async (t) => {
  const ids = new RequestIds()
  const seen = new Set<string>()
  // More than one pool of random bytes.
  for (let i = 0; i < 1000; i++) {
    const { id, generated } = ids.of({})
    t.ok(generated)
    t.equal(id, `tt-${process.pid.toString(36)}-${id.slice(-16)}`)
    t.match(id, /-[0-9a-f]{16}$/)
    seen.add(id)
  }
  t.equal(seen.size, 1000, 'all different')
  const [a, b] = [ids.of({}).id, ids.of({}).id]
  t.not(a.slice(0, -8), b.slice(0, -8), 'consecutive ids differ beyond a counter’s last digits')
})

t.test('a client’s x-request-id is kept as given', async (t) => {
  t.same(new RequestIds().of({ 'x-request-id': 'abc' }), { id: 'abc', generated: false })
  t.equal(new RequestIds().of({ 'x-request-id': 'x'.repeat(201) }).generated, true, 'too long: a made-up one')
})
