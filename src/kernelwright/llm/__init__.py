"""LLM clients: one protocol (`backend.Backend`), the HTTP plumbing they share, and one module per
provider (`openai_chat`, `anthropic_messages`), made by `backend.make_backend("PROVIDER:MODEL")`;
`scripted` is a local OpenAI-compatible server that plays scripted replies for tests and demos.
A low layer: it imports only core and the standard library."""
