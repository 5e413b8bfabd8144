wrk.method = "POST"
wrk.body = '{"model":"auto","messages":[{"role":"user","content":"hi"}]}'
wrk.headers["content-type"] = "application/json"
