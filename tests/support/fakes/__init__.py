"""Local fakes of the model APIs the real coding-agent CLIs call, served on 127.0.0.1."""
