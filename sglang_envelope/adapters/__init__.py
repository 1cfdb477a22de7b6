"""Transports to SGLang over real HTTP clients, each client imported only when used."""
