"""The local Slack sandbox: Slack's Web API for the bot, and a page where people click.

``slack_api`` answers the bot as Slack does (the tests use it alone), ``workspace`` adds what
people see, ``blocks`` and ``mrkdwn`` draw it, ``page`` lays it out, ``interactions`` turns
clicks into Slack's signed requests (built by ``slack_requests``), and ``server`` serves it.
"""
