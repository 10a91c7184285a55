// The HTTP ceiling of this machine: a bare node:http server that reads the body and answers 200
// with a small JSON body, no database, no checks. Prints its port on the first line of stdout.
import { createServer } from 'node:http'

const body = '{"name":"bench plant","tag":"bench"}'
const server = createServer((req, res) => {
  const chunks: Buffer[] = []
  req.on('data', (chunk: Buffer) => chunks.push(chunk))
  req.on('end', () => {
    Buffer.concat(chunks)
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
    res.end(body)
  })
})
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  const address = server.address()
  process.stdout.write(`${typeof address === 'object' && address ? address.port : ''}\n`)
})
process.on('SIGTERM', () => server.close(() => process.exit(0)))
