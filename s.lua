wrk.method="POST"
wrk.body='{"model":"auto","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'
wrk.headers["Content-Type"]="application/json"
