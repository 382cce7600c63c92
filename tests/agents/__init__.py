"""Offline agents for the tests: a scripted llm model and tools that keep a ledger."""
