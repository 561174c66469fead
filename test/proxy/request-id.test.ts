import t from 'tap'
import { RequestIds } from '../../src/proxy/request-id.ts'

t.test('a made-up request id carries 122 random bits, so no id leads to another request’s', async (t) => {
  const ids = new RequestIds()
  const seen = new Set<string>()
  for (let i = 0; i < 1000; i++) {
    const { id, generated } = ids.of({})
    t.ok(generated)
    t.match(id, /^tt-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    seen.add(id)
  }
  t.equal(seen.size, 1000, 'all different')
  const [a, b] = [ids.of({}).id, ids.of({}).id]
  t.not(a.slice(0, -4), b.slice(0, -4), 'consecutive ids share no walkable prefix and counter')
})

t.test('a client’s x-request-id is kept as given', async (t) => {
  t.same(new RequestIds().of({ 'x-request-id': 'abc' }), { id: 'abc', generated: false })
  t.equal(new RequestIds().of({ 'x-request-id': 'x'.repeat(201) }).generated, true, 'too long: a made-up one')
})
