-- Turns from the OpenAI-compatible endpoint carry what the calling application asked for: its own
-- tools (the model may call them; such calls end the turn and go back to the caller), its system
-- instructions, max_tokens, temperature, the model name it used, and how many of the turn's messages
-- it sent (the rest are the agent's output). NULL for turns of the REST API.
ALTER TABLE turns ADD COLUMN IF NOT EXISTS client jsonb;
