"""The trainop API: pydantic models of the custom resources and the documented constants."""
