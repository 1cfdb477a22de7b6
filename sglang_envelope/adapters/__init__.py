"""Transports to SGLang over real HTTP clients, each importing its client only when used."""
